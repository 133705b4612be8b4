//! Incremental decoders for the two directions of an HA stream ([`super::wire`]): bytes go
//! in as they arrive, in chunks of any size ([`FromSlaveDecoder::feed`]); whole messages
//! come out ([`FromSlaveDecoder::next`]).
//!
//! Invariants:
//! - buffering is bounded: a decoder holds at most its direction's largest legal message
//!   ([`FROM_SLAVE_BUFFER_BYTES`], [`FROM_MASTER_BUFFER_BYTES`]); `feed` takes at most
//!   [`FromSlaveDecoder::space`] bytes and refuses more, so the caller reads into at most
//!   that. Every partial message fits, so after `next` drains whole messages there is room;
//! - a size or value that makes a message impossible is refused as soon as its bytes are
//!   in, before waiting for a body it announces (an oversize frame costs 36 bytes, not
//!   1 MiB);
//! - structural checks only: a negative offset, a body size that is not 12 × n, epochs out
//!   of order are refused here; whether a valid value is true (a report behind the last
//!   one, an offset the master does not have) is for the stream state machines;
//! - after an error the decoder is poisoned: every later call answers the same error, and
//!   the caller closes the stream.

use super::epochs::{EpochCache, EpochEntry, EpochError};
use super::wire::*;

/// Why bytes are not a message of this wire.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("unknown HA state {state} (expected {expected})")]
    UnknownState { state: i32, expected: &'static str },
    #[error("{field} is negative: {value}")]
    Negative { field: &'static str, value: i64 },
    #[error("{field} {size} is above the limit {max}")]
    TooLarge {
        field: &'static str,
        size: u64,
        max: usize,
    },
    #[error("{field} must be 0 or 1, got {value}")]
    BadFlag { field: &'static str, value: i16 },
    #[error("handshake magic {found:#010x} is not ringmq's {RINGMQ_MAGIC:#010x}: the peer is not a ringmq slave")]
    BadMagic { found: u32 },
    #[error("handshake version {found} is not the supported {RINGMQ_VERSION}")]
    BadVersion { found: u16 },
    #[error("shard index {index} is not below the shard count {count}")]
    ShardIndex { index: u16, count: u16 },
    #[error("{field} is not UTF-8")]
    NotUtf8 { field: &'static str },
    #[error("handshake reply body size {size} is not a multiple of {EPOCH_ENTRY_BYTES}")]
    EpochBodySize { size: i32 },
    #[error("handshake reply names last epoch {stated}, its entries end with {found:?}")]
    LastEpoch { stated: i32, found: Option<u32> },
    #[error("handshake reply field {field} must be 0, got {value}")]
    NotZero { field: &'static str, value: i64 },
    #[error("master's epochs are out of order: {0}")]
    Epochs(EpochError),
    #[error("epoch {epoch} starts at {start}, past the master max offset {master_max}")]
    EpochPastMax {
        epoch: u32,
        start: u64,
        master_max: u64,
    },
    #[error("frame at {offset} names epoch {epoch} starting later, at {epoch_start}")]
    EpochStartAfterOffset {
        offset: u64,
        epoch: u32,
        epoch_start: u64,
    },
    #[error("frame at {offset} with {body_len} bytes ends past the largest offset")]
    OffsetOverflow { offset: u64, body_len: u32 },
    #[error("refusal body size {size} is too short for its reason code")]
    RefusalTooShort { size: i32 },
    #[error("fed {fed} bytes with room for {space}: read at most space() bytes")]
    Overfull { fed: usize, space: usize },
    #[error("the stream ended inside a message: {buffered} bytes of it were read")]
    Truncated { buffered: usize },
}

/// The largest slave-to-master message: a handshake with both names at their longest, or
/// a refusal with its longest text.
pub const FROM_SLAVE_BUFFER_BYTES: usize = max(
    HANDSHAKE_FIXED_BYTES + 2 + 2 * NAME_BYTES_MAX,
    REFUSAL_HEADER_BYTES + 2 + REFUSAL_TEXT_MAX,
);
/// The largest master-to-slave message: a frame with the largest body (a reply with every
/// epoch, or a refusal, is smaller).
pub const FROM_MASTER_BUFFER_BYTES: usize = MASTER_HEADER_BYTES + FRAME_BODY_MAX;

const _: () =
    assert!(MASTER_HEADER_BYTES + EPOCHS_MAX * EPOCH_ENTRY_BYTES <= FROM_MASTER_BUFFER_BYTES);
const _: () = assert!(REFUSAL_HEADER_BYTES + 2 + REFUSAL_TEXT_MAX <= FROM_MASTER_BUFFER_BYTES);
const _: () = assert!(REPORT_BYTES <= FROM_SLAVE_BUFFER_BYTES);

const fn max(first: usize, second: usize) -> usize {
    if first > second {
        first
    } else {
        second
    }
}

/// Bytes received and not yet decoded, at most `capacity` of them.
#[derive(Debug)]
struct Buffer {
    bytes: Vec<u8>,
    start: usize,
    capacity: usize,
    failed: Option<WireError>,
}

impl Buffer {
    fn new(capacity: usize) -> Buffer {
        Buffer {
            bytes: Vec::new(),
            start: 0,
            capacity,
            failed: None,
        }
    }

    fn buffered(&self) -> usize {
        self.bytes.len() - self.start
    }

    fn space(&self) -> usize {
        self.capacity - self.buffered()
    }

    fn feed(&mut self, input: &[u8]) -> Result<(), WireError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        let space = self.space();
        if input.len() > space {
            return Err(self.fail(WireError::Overfull {
                fed: input.len(),
                space,
            }));
        }
        if self.bytes.len() + input.len() > self.capacity {
            // Move the undecoded tail to the front instead of growing past the bound.
            self.bytes.drain(..self.start);
            self.start = 0;
        }
        self.bytes.extend_from_slice(input);
        assert!(
            self.bytes.len() <= self.capacity,
            "decoder buffer {} past its bound {}",
            self.bytes.len(),
            self.capacity
        );
        Ok(())
    }

    fn available(&self) -> &[u8] {
        &self.bytes[self.start..]
    }

    fn consume(&mut self, length: usize) {
        assert!(
            length <= self.buffered(),
            "consumed {length} of {} buffered bytes",
            self.buffered()
        );
        self.start += length;
        if self.start == self.bytes.len() {
            self.bytes.clear();
            self.start = 0;
        }
    }

    fn fail(&mut self, error: WireError) -> WireError {
        self.failed = Some(error.clone());
        error
    }

    /// Runs `decode` over the buffered bytes; a message it returns (with its length) is
    /// consumed, an error poisons the buffer.
    fn next<T>(
        &mut self,
        decode: impl Fn(&[u8]) -> Result<Option<(T, usize)>, WireError>,
    ) -> Result<Option<T>, WireError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        match decode(self.available()) {
            Ok(Some((message, length))) => {
                self.consume(length);
                Ok(Some(message))
            }
            Ok(None) => Ok(None),
            Err(error) => Err(self.fail(error)),
        }
    }

    fn finish(&mut self) -> Result<(), WireError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        match self.buffered() {
            0 => Ok(()),
            buffered => Err(self.fail(WireError::Truncated { buffered })),
        }
    }
}

/// Decodes what a slave sends; the master's side of a stream.
#[derive(Debug)]
pub struct FromSlaveDecoder {
    buffer: Buffer,
}

impl Default for FromSlaveDecoder {
    fn default() -> Self {
        FromSlaveDecoder::new()
    }
}

impl FromSlaveDecoder {
    pub fn new() -> FromSlaveDecoder {
        FromSlaveDecoder {
            buffer: Buffer::new(FROM_SLAVE_BUFFER_BYTES),
        }
    }

    /// How many bytes `feed` takes now.
    pub fn space(&self) -> usize {
        self.buffer.space()
    }

    /// Adds received bytes; more than [`Self::space`] is refused (and poisons).
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), WireError> {
        self.buffer.feed(bytes)
    }

    /// The next whole message, `None` until its bytes are all in.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<FromSlave>, WireError> {
        self.buffer.next(decode_from_slave)
    }

    /// At the end of the stream: an error if it stopped inside a message.
    pub fn finish(&mut self) -> Result<(), WireError> {
        self.buffer.finish()
    }
}

/// Decodes what a master sends; the slave's side of a stream.
#[derive(Debug)]
pub struct FromMasterDecoder {
    buffer: Buffer,
}

impl Default for FromMasterDecoder {
    fn default() -> Self {
        FromMasterDecoder::new()
    }
}

impl FromMasterDecoder {
    pub fn new() -> FromMasterDecoder {
        FromMasterDecoder {
            buffer: Buffer::new(FROM_MASTER_BUFFER_BYTES),
        }
    }

    /// How many bytes `feed` takes now.
    pub fn space(&self) -> usize {
        self.buffer.space()
    }

    /// Adds received bytes; more than [`Self::space`] is refused (and poisons).
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), WireError> {
        self.buffer.feed(bytes)
    }

    /// The next whole message, `None` until its bytes are all in.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<FromMaster>, WireError> {
        self.buffer.next(decode_from_master)
    }

    /// At the end of the stream: an error if it stopped inside a message.
    pub fn finish(&mut self) -> Result<(), WireError> {
        self.buffer.finish()
    }
}

/// Big-endian reads at fixed positions of a slice the caller checked is long enough.
fn i16_at(bytes: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([bytes[at], bytes[at + 1]])
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}

fn i32_at(bytes: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn i64_at(bytes: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// A Java long that must not be negative.
fn offset_at(bytes: &[u8], at: usize, field: &'static str) -> Result<u64, WireError> {
    let value = i64_at(bytes, at);
    u64::try_from(value).map_err(|_| WireError::Negative { field, value })
}

/// A Java int that must not be negative.
fn epoch_at(bytes: &[u8], at: usize, field: &'static str) -> Result<u32, WireError> {
    let value = i32_at(bytes, at);
    u32::try_from(value).map_err(|_| WireError::Negative {
        field,
        value: value.into(),
    })
}

/// A body size that must not be negative nor above `max`.
fn size_at(bytes: &[u8], at: usize, field: &'static str, max: usize) -> Result<usize, WireError> {
    let size = epoch_at(bytes, at, field)? as usize;
    if size > max {
        return Err(WireError::TooLarge {
            field,
            size: size as u64,
            max,
        });
    }
    Ok(size)
}

type Decoded<T> = Result<Option<(T, usize)>, WireError>;

fn decode_from_slave(bytes: &[u8]) -> Decoded<FromSlave> {
    if bytes.len() < 4 {
        return Ok(None);
    }
    match i32_at(bytes, 0) {
        STATE_HANDSHAKE => Ok(decode_handshake(bytes)?
            .map(|(handshake, length)| (FromSlave::Handshake(handshake), length))),
        STATE_TRANSFER if bytes.len() < REPORT_BYTES => Ok(None),
        STATE_TRANSFER => {
            let offset = offset_at(bytes, 4, "reported offset")?;
            Ok(Some((FromSlave::Report(offset), REPORT_BYTES)))
        }
        STATE_REFUSAL => {
            Ok(decode_refusal(bytes)?
                .map(|(refusal, length)| (FromSlave::Refusal(refusal), length)))
        }
        state => Err(WireError::UnknownState {
            state,
            expected: "1 (handshake), 2 (report) or 4 (refusal)",
        }),
    }
}

fn flag_at(bytes: &[u8], at: usize, field: &'static str) -> Result<bool, WireError> {
    match i16_at(bytes, at) {
        0 => Ok(false),
        1 => Ok(true),
        value => Err(WireError::BadFlag { field, value }),
    }
}

/// A length-prefixed name at `at`, if all of it is in: the name and where it ends.
fn name_at(
    bytes: &[u8],
    at: usize,
    field: &'static str,
) -> Result<Option<(String, usize)>, WireError> {
    if bytes.len() < at + 2 {
        return Ok(None);
    }
    let length = u16_at(bytes, at) as usize;
    if length > NAME_BYTES_MAX {
        return Err(WireError::TooLarge {
            field,
            size: length as u64,
            max: NAME_BYTES_MAX,
        });
    }
    let end = at + 2 + length;
    if bytes.len() < end {
        return Ok(None);
    }
    let name =
        std::str::from_utf8(&bytes[at + 2..end]).map_err(|_| WireError::NotUtf8 { field })?;
    Ok(Some((name.to_string(), end)))
}

fn decode_handshake(bytes: &[u8]) -> Decoded<SlaveHandshake> {
    // Check the magic as soon as it is in: a peer that is not ringmq is told so at once.
    if bytes.len() < HANDSHAKE_ROCKETMQ_BYTES + 4 {
        return Ok(None);
    }
    let magic = u32::from_be_bytes(bytes[16..20].try_into().expect("4 bytes"));
    if magic != RINGMQ_MAGIC {
        return Err(WireError::BadMagic { found: magic });
    }
    if bytes.len() < HANDSHAKE_FIXED_BYTES {
        return Ok(None);
    }
    let version = u16_at(bytes, 20);
    if version != RINGMQ_VERSION {
        return Err(WireError::BadVersion { found: version });
    }
    let sync_from_last_file = flag_at(bytes, 4, "isSyncFromLastFile")?;
    let async_learner = flag_at(bytes, 6, "isAsyncLearner")?;
    let slave_broker_id = offset_at(bytes, 8, "slave broker id")?;
    let shard_index = u16_at(bytes, 22);
    let shard_count = u16_at(bytes, 24);
    if shard_index >= shard_count {
        return Err(WireError::ShardIndex {
            index: shard_index,
            count: shard_count,
        });
    }
    let Some((cluster, cluster_end)) = name_at(bytes, 26, "cluster name")? else {
        return Ok(None);
    };
    let Some((broker, end)) = name_at(bytes, cluster_end, "broker name")? else {
        return Ok(None);
    };
    let handshake = SlaveHandshake {
        sync_from_last_file,
        async_learner,
        slave_broker_id,
        shard_index,
        shard_count,
        cluster,
        broker,
    };
    Ok(Some((handshake, end)))
}

fn decode_refusal(bytes: &[u8]) -> Decoded<Refusal> {
    if bytes.len() < REFUSAL_HEADER_BYTES {
        return Ok(None);
    }
    let size = size_at(bytes, 4, "refusal body size", 2 + REFUSAL_TEXT_MAX)?;
    if size < 2 {
        return Err(WireError::RefusalTooShort { size: size as i32 });
    }
    let end = REFUSAL_HEADER_BYTES + size;
    if bytes.len() < end {
        return Ok(None);
    }
    let reason = RefusalReason::from_code(u16_at(bytes, REFUSAL_HEADER_BYTES));
    let text = std::str::from_utf8(&bytes[REFUSAL_HEADER_BYTES + 2..end]).map_err(|_| {
        WireError::NotUtf8 {
            field: "refusal text",
        }
    })?;
    let refusal = Refusal {
        reason,
        text: text.to_string(),
    };
    Ok(Some((refusal, end)))
}

fn decode_from_master(bytes: &[u8]) -> Decoded<FromMaster> {
    if bytes.len() < 4 {
        return Ok(None);
    }
    match i32_at(bytes, 0) {
        STATE_REFUSAL => {
            Ok(decode_refusal(bytes)?
                .map(|(refusal, length)| (FromMaster::Refusal(refusal), length)))
        }
        STATE_HANDSHAKE | STATE_TRANSFER if bytes.len() < MASTER_HEADER_BYTES => Ok(None),
        STATE_HANDSHAKE => {
            Ok(decode_reply(bytes)?.map(|(reply, length)| (FromMaster::Reply(reply), length)))
        }
        STATE_TRANSFER => {
            Ok(decode_frame(bytes)?.map(|(frame, length)| (FromMaster::Frame(frame), length)))
        }
        state => Err(WireError::UnknownState {
            state,
            expected: "1 (handshake reply), 2 (frame) or 4 (refusal)",
        }),
    }
}

fn decode_reply(bytes: &[u8]) -> Decoded<HandshakeReply> {
    let size = size_at(
        bytes,
        4,
        "handshake reply body size",
        EPOCHS_MAX * EPOCH_ENTRY_BYTES,
    )?;
    if size % EPOCH_ENTRY_BYTES != 0 {
        return Err(WireError::EpochBodySize { size: size as i32 });
    }
    let master_max = offset_at(bytes, 8, "master max offset")?;
    let stated_last = i32_at(bytes, 16);
    for (field, at) in [("epochStartOffset", 20), ("confirmOffset", 28)] {
        let value = i64_at(bytes, at);
        if value != 0 {
            return Err(WireError::NotZero { field, value });
        }
    }
    let end = MASTER_HEADER_BYTES + size;
    if bytes.len() < end {
        return Ok(None);
    }
    let epochs = reply_epochs(&bytes[MASTER_HEADER_BYTES..end], master_max)?;
    let found = epochs.last_epoch();
    if found.map_or(-1, |epoch| epoch as i32) != stated_last {
        return Err(WireError::LastEpoch {
            stated: stated_last,
            found,
        });
    }
    Ok(Some((HandshakeReply { master_max, epochs }, end)))
}

fn reply_epochs(body: &[u8], master_max: u64) -> Result<EpochCache, WireError> {
    let mut entries = Vec::with_capacity(body.len() / EPOCH_ENTRY_BYTES);
    for at in (0..body.len()).step_by(EPOCH_ENTRY_BYTES) {
        let epoch = epoch_at(body, at, "epoch")?;
        let start = offset_at(body, at + 4, "epoch start offset")?;
        if start > master_max {
            return Err(WireError::EpochPastMax {
                epoch,
                start,
                master_max,
            });
        }
        entries.push(EpochEntry { epoch, start });
    }
    EpochCache::from_entries(&entries).map_err(WireError::Epochs)
}

fn decode_frame(bytes: &[u8]) -> Decoded<TransferFrame> {
    let body_len = size_at(bytes, 4, "frame body size", FRAME_BODY_MAX)?;
    let header = FrameHeader {
        offset: offset_at(bytes, 8, "frame offset")?,
        epoch: epoch_at(bytes, 16, "frame epoch")?,
        epoch_start: offset_at(bytes, 20, "epoch start offset")?,
        confirm_offset: offset_at(bytes, 28, "confirm offset")?,
        body_len: body_len as u32,
    };
    if header.epoch_start > header.offset {
        return Err(WireError::EpochStartAfterOffset {
            offset: header.offset,
            epoch: header.epoch,
            epoch_start: header.epoch_start,
        });
    }
    if header
        .offset
        .checked_add(body_len as u64)
        .is_none_or(|end| end > OFFSET_MAX)
    {
        return Err(WireError::OffsetOverflow {
            offset: header.offset,
            body_len: header.body_len,
        });
    }
    let end = MASTER_HEADER_BYTES + body_len;
    if bytes.len() < end {
        return Ok(None);
    }
    let body = bytes[MASTER_HEADER_BYTES..end].to_vec();
    Ok(Some((TransferFrame { header, body }, end)))
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
