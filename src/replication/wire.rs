//! The HA wire of one shard's replication stream: the controller-mode layout of
//! reference-2 §6.3 (RocketMQ's `AutoSwitchHAClient` / `AutoSwitchHAConnection`),
//! big-endian, with a ringmq extension to the slave's handshake. This module owns the
//! messages, their encoding and the wire's limits; [`super::decode`] owns decoding.
//!
//! Slave to master:
//!
//! | message | layout |
//! |---|---|
//! | handshake | RocketMQ's 16 B (i32 state=1, i16 `isSyncFromLastFile`, i16 `isAsyncLearner`, i64 slaveBrokerId), then the ringmq extension: u32 [`RINGMQ_MAGIC`], u16 [`RINGMQ_VERSION`], u16 shard index, u16 shard count, u16 length + UTF-8 cluster name, u16 length + UTF-8 broker name |
//! | transfer report (12 B) | i32 state=2, i64 slave max offset |
//! | refusal | i32 state=4, i32 bodySize, then u16 reason code and UTF-8 text |
//!
//! Master to slave:
//!
//! | message | layout |
//! |---|---|
//! | handshake reply | 36 B header: i32 state=1, i32 bodySize (12 × n), i64 master max offset, i32 last epoch (-1 when n = 0), i64 0, i64 0; then n × {i32 epoch, i64 startOffset} |
//! | transfer frame | 36 B header: i32 state=2, i32 bodySize, i64 offset, i32 epoch, i64 epochStartOffset, i64 confirmOffset; then the body (bodySize 0 = heartbeat) |
//! | refusal | as the slave's |
//!
//! The reply's header is the frame header's shape, as RocketMQ writes it
//! (`buildHandshakeBuffer` puts two zero i64 where a frame has epochStartOffset and
//! confirmOffset); reference-2 §6.3 lists the reply without them, but RocketMQ's slave
//! reads the 36 B header for both, and so does ringmq's.
//!
//! Why an extension: ringmq replicates each shard's CommitLog on its own stream
//! (reference-2 §5.6.1), so a stream must say which shard it is, and both ends must agree
//! on the shard count, the cluster and the broker group before a byte of log moves. A Java
//! slave would not send the extension, and a Java master would not understand one stream
//! per shard: byte compatibility with Java peers is neither possible nor needed. The
//! RocketMQ fields stay where RocketMQ puts them, so a capture reads the same up to the
//! magic. The refusal message (state 4, RocketMQ's SHUTDOWN ordinal) is ringmq's too: it
//! lets the refused side print why instead of seeing a bare close.
//!
//! Offsets and epochs are signed on the wire (Java longs and ints) and unsigned here: a
//! negative value is refused by the decoder, and encoding asserts each value fits.

use super::epochs::EpochCache;

/// RocketMQ's `HAConnectionState.HANDSHAKE` ordinal.
pub const STATE_HANDSHAKE: i32 = 1;
/// RocketMQ's `HAConnectionState.TRANSFER` ordinal.
pub const STATE_TRANSFER: i32 = 2;
/// RocketMQ's `HAConnectionState.SHUTDOWN` ordinal: ringmq's refusal, the stream ends.
pub const STATE_REFUSAL: i32 = 4;

/// "RMQR": the first bytes of ringmq's handshake extension.
pub const RINGMQ_MAGIC: u32 = u32::from_be_bytes(*b"RMQR");
/// The extension's layout version; a peer with another is refused, not guessed at.
pub const RINGMQ_VERSION: u16 = 1;

/// RocketMQ's part of the slave handshake.
pub const HANDSHAKE_ROCKETMQ_BYTES: usize = 16;
/// The handshake up to and with the cluster name's length.
pub const HANDSHAKE_FIXED_BYTES: usize = HANDSHAKE_ROCKETMQ_BYTES + 4 + 2 + 2 + 2 + 2;
/// A cluster or broker name's longest encoding. RocketMQ's names are validated to at most
/// 127 characters (`TopicValidator`'s limit, applied to broker names by the admin tools);
/// 255 bytes holds that in any script while bounding the handshake.
pub const NAME_BYTES_MAX: usize = 255;
/// The slave's report: state and offset (RocketMQ's `TRANSFER_HEADER_SIZE`).
pub const REPORT_BYTES: usize = 12;
/// The master's header, for the reply and for frames (RocketMQ's `MSG_HEADER_SIZE`).
pub const MASTER_HEADER_BYTES: usize = 36;
/// One epoch entry in the reply (RocketMQ's `EPOCH_ENTRY_SIZE`).
pub const EPOCH_ENTRY_BYTES: usize = 12;
/// The most epoch entries a reply may carry: RocketMQ's master sizes its handshake buffer
/// for 1000 (`EPOCH_ENTRY_SIZE * 1000`), so a longer history cannot come from it either.
pub const EPOCHS_MAX: usize = 1000;
/// The largest frame body. RocketMQ's `haTransferBatchSize` is 32 KiB; ringmq's master
/// may send larger frames to catch an empty slave up at disk speed, and the slave buffers
/// a whole frame before appending it, so 1 MiB bounds each stream's memory at 32 times
/// RocketMQ's batch.
pub const FRAME_BODY_MAX: usize = 1 << 20;
/// A refusal's header: state and bodySize.
pub const REFUSAL_HEADER_BYTES: usize = 8;
/// A refusal's longest text: enough for two names at their longest and the sentence.
pub const REFUSAL_TEXT_MAX: usize = 1024;

/// What a slave says first on a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlaveHandshake {
    /// Start an empty slave at the master's last segment, not its whole history.
    pub sync_from_last_file: bool,
    /// RocketMQ's learner flag: the slave never joins the in-sync set.
    pub async_learner: bool,
    pub slave_broker_id: u64,
    /// Which shard's log this stream carries, below `shard_count`.
    pub shard_index: u16,
    /// The slave's shard count; the master's must be the same.
    pub shard_count: u16,
    pub cluster: String,
    pub broker: String,
}

/// The master's answer to a handshake: its max offset and its whole epoch history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HandshakeReply {
    pub master_max: u64,
    pub epochs: EpochCache,
}

/// A frame's header: the body's place in the log and the epoch that wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// The log offset of the body's first byte (for a heartbeat, the next to send).
    pub offset: u64,
    pub epoch: u32,
    pub epoch_start: u64,
    /// The master's confirm offset: what every in-sync replica holds.
    pub confirm_offset: u64,
    /// 0 for a heartbeat.
    pub body_len: u32,
}

/// A frame with its body: raw CommitLog bytes, possibly ending mid-record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferFrame {
    pub header: FrameHeader,
    pub body: Vec<u8>,
}

/// Why one side ends the stream, as a code a program can act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusalReason {
    ShardCount,
    ClusterName,
    BrokerName,
    /// The slave named an offset the master cannot serve from (beyond its max).
    ForgedOffset,
    NoConsistentPoint,
    /// The slave's store has data but no epoch history, so nothing proves it matches.
    DataWithoutEpochs,
    /// A report went backwards.
    AckBackwards,
    /// The peer sent bytes that are not this wire.
    BadInput,
    /// The handshake reached a broker that is not a master of this shard.
    NotAMaster,
    /// The slave claims broker id 0, the master's.
    BrokerIdZero,
    /// A frame broke the stream's order (offset or epoch).
    OutOfOrder,
    /// A code this build does not know; kept so the text still prints.
    Other(u16),
}

impl RefusalReason {
    pub fn code(self) -> u16 {
        match self {
            RefusalReason::ShardCount => 1,
            RefusalReason::ClusterName => 2,
            RefusalReason::BrokerName => 3,
            RefusalReason::ForgedOffset => 4,
            RefusalReason::NoConsistentPoint => 5,
            RefusalReason::DataWithoutEpochs => 6,
            RefusalReason::AckBackwards => 7,
            RefusalReason::BadInput => 8,
            RefusalReason::NotAMaster => 9,
            RefusalReason::BrokerIdZero => 10,
            RefusalReason::OutOfOrder => 11,
            RefusalReason::Other(code) => code,
        }
    }

    pub fn from_code(code: u16) -> RefusalReason {
        const KNOWN: [RefusalReason; 11] = [
            RefusalReason::ShardCount,
            RefusalReason::ClusterName,
            RefusalReason::BrokerName,
            RefusalReason::ForgedOffset,
            RefusalReason::NoConsistentPoint,
            RefusalReason::DataWithoutEpochs,
            RefusalReason::AckBackwards,
            RefusalReason::BadInput,
            RefusalReason::NotAMaster,
            RefusalReason::BrokerIdZero,
            RefusalReason::OutOfOrder,
        ];
        KNOWN
            .into_iter()
            .find(|reason| reason.code() == code)
            .unwrap_or(RefusalReason::Other(code))
    }
}

/// A refusal: the reason and a sentence for the peer's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: RefusalReason,
    pub text: String,
}

/// A message on the slave-to-master direction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FromSlave {
    Handshake(SlaveHandshake),
    /// The slave's max offset: the next byte it needs.
    Report(u64),
    Refusal(Refusal),
}

/// A message on the master-to-slave direction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FromMaster {
    Reply(HandshakeReply),
    Frame(TransferFrame),
    Refusal(Refusal),
}

/// The largest value a Java long holds: every offset on the wire is at most this.
pub const OFFSET_MAX: u64 = i64::MAX as u64;
/// The largest value a Java int holds: every epoch on the wire is at most this.
pub const EPOCH_MAX: u32 = i32::MAX as u32;

fn put_offset(out: &mut Vec<u8>, what: &str, value: u64) {
    assert!(
        value <= OFFSET_MAX,
        "{what} {value} does not fit a Java long"
    );
    out.extend_from_slice(&(value as i64).to_be_bytes());
}

fn put_epoch(out: &mut Vec<u8>, value: u32) {
    assert!(value <= EPOCH_MAX, "epoch {value} does not fit a Java int");
    out.extend_from_slice(&(value as i32).to_be_bytes());
}

fn put_name(out: &mut Vec<u8>, what: &str, name: &str) {
    assert!(
        name.len() <= NAME_BYTES_MAX,
        "{what} '{name}' is {} bytes, above {NAME_BYTES_MAX}",
        name.len()
    );
    out.extend_from_slice(&(name.len() as u16).to_be_bytes());
    out.extend_from_slice(name.as_bytes());
}

impl SlaveHandshake {
    /// Appends the handshake's bytes. The caller validated the names (a broker refuses
    /// to start with a name past [`NAME_BYTES_MAX`]); a bad value here is a bug.
    pub fn encode(&self, out: &mut Vec<u8>) {
        assert!(
            self.shard_index < self.shard_count,
            "shard {} of {} shards",
            self.shard_index,
            self.shard_count
        );
        out.extend_from_slice(&STATE_HANDSHAKE.to_be_bytes());
        out.extend_from_slice(&i16::from(self.sync_from_last_file).to_be_bytes());
        out.extend_from_slice(&i16::from(self.async_learner).to_be_bytes());
        put_offset(out, "slave broker id", self.slave_broker_id);
        out.extend_from_slice(&RINGMQ_MAGIC.to_be_bytes());
        out.extend_from_slice(&RINGMQ_VERSION.to_be_bytes());
        out.extend_from_slice(&self.shard_index.to_be_bytes());
        out.extend_from_slice(&self.shard_count.to_be_bytes());
        put_name(out, "cluster name", &self.cluster);
        put_name(out, "broker name", &self.broker);
    }
}

/// Appends a transfer report of `max_offset`.
pub fn encode_report(max_offset: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(&STATE_TRANSFER.to_be_bytes());
    put_offset(out, "reported offset", max_offset);
}

impl HandshakeReply {
    pub fn encode(&self, out: &mut Vec<u8>) {
        let entries = self.epochs.entries();
        assert!(
            entries.len() <= EPOCHS_MAX,
            "{} epochs, above the reply's {EPOCHS_MAX}",
            entries.len()
        );
        if let Some(last) = self.epochs.last() {
            assert!(
                last.start <= self.master_max,
                "epoch {} starts at {}, past the master max {}",
                last.epoch,
                last.start,
                self.master_max
            );
        }
        out.extend_from_slice(&STATE_HANDSHAKE.to_be_bytes());
        out.extend_from_slice(&((entries.len() * EPOCH_ENTRY_BYTES) as i32).to_be_bytes());
        put_offset(out, "master max offset", self.master_max);
        let last_epoch = self.epochs.last_epoch().map_or(-1, |epoch| {
            assert!(epoch <= EPOCH_MAX, "epoch {epoch} does not fit a Java int");
            epoch as i32
        });
        out.extend_from_slice(&last_epoch.to_be_bytes());
        out.extend_from_slice(&[0; 16]);
        for entry in entries {
            put_epoch(out, entry.epoch);
            put_offset(out, "epoch start", entry.start);
        }
    }
}

impl FrameHeader {
    /// Appends the 36 B header; the caller sends `body_len` body bytes after it (from the
    /// CommitLog files, without copying them through a buffer).
    pub fn encode(&self, out: &mut Vec<u8>) {
        assert!(
            self.body_len as usize <= FRAME_BODY_MAX,
            "frame body {} above {FRAME_BODY_MAX}",
            self.body_len
        );
        assert!(
            self.epoch_start <= self.offset,
            "frame at {} in epoch {} starting later, at {}",
            self.offset,
            self.epoch,
            self.epoch_start
        );
        out.extend_from_slice(&STATE_TRANSFER.to_be_bytes());
        out.extend_from_slice(&(self.body_len as i32).to_be_bytes());
        put_offset(out, "frame offset", self.offset);
        put_epoch(out, self.epoch);
        put_offset(out, "epoch start", self.epoch_start);
        put_offset(out, "confirm offset", self.confirm_offset);
    }
}

impl TransferFrame {
    pub fn encode(&self, out: &mut Vec<u8>) {
        assert_eq!(
            self.header.body_len as usize,
            self.body.len(),
            "frame header and body disagree on the length"
        );
        self.header.encode(out);
        out.extend_from_slice(&self.body);
    }
}

impl Refusal {
    /// Appends the refusal; a text past [`REFUSAL_TEXT_MAX`] is cut at a character
    /// boundary, since a refusal must go out whatever names it quotes.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut end = self.text.len().min(REFUSAL_TEXT_MAX);
        while !self.text.is_char_boundary(end) {
            end -= 1;
        }
        let text = &self.text.as_bytes()[..end];
        out.extend_from_slice(&STATE_REFUSAL.to_be_bytes());
        out.extend_from_slice(&((2 + text.len()) as i32).to_be_bytes());
        out.extend_from_slice(&self.reason.code().to_be_bytes());
        out.extend_from_slice(text);
    }
}

impl FromSlave {
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            FromSlave::Handshake(handshake) => handshake.encode(out),
            FromSlave::Report(offset) => encode_report(*offset, out),
            FromSlave::Refusal(refusal) => refusal.encode(out),
        }
    }
}

impl FromMaster {
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            FromMaster::Reply(reply) => reply.encode(out),
            FromMaster::Frame(frame) => frame.encode(out),
            FromMaster::Refusal(refusal) => refusal.encode(out),
        }
    }
}
