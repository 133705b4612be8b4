//! The master's side of one shard's HA stream as pure decisions: the I/O service feeds it
//! decoded messages ([`super::decode::FromSlaveDecoder`]) and the shard store's facts as
//! plain numbers ([`MasterLog`]), and does what it answers: send the reply, send a frame
//! of a given byte range, record an ack, or send a refusal and close.
//!
//! The stream goes handshake → reply → first report (the start point) → frames. Rules:
//! - the handshake must name this master's cluster, broker name, shard count and this
//!   shard; a mismatch is refused with a text naming both values;
//! - the start point (the first report, reference-2 §6.3): 0 means an empty slave, which
//!   starts at the master's min offset, or at its last segment's start with
//!   `syncFromLastFile`; a report below the min offset restarts the slave from the min
//!   (the answer says so, to be logged); a report above the master's max is refused
//!   (a forged offset, or a slave ahead of its master);
//! - every frame covers `[next, next + len)` with len = min(written - next, batch, to the
//!   segment's end, to the epoch's end): frames never cross a segment or an epoch
//!   boundary, and carry the epoch that wrote them; a heartbeat (empty frame at `next`)
//!   goes out when nothing was sent for the heartbeat interval;
//! - every later report is the slave's ack. Acks never go backwards within a stream (a
//!   slave truncates only before its first report, and its log only grows after), and
//!   never pass what was sent (`next`); either is a lying peer and is refused. Equal
//!   reports are fine: the slave repeats its offset as a keepalive. The one report that
//!   may be anything up to the master's max is the first, which is the start point, not
//!   an ack of this stream's bytes (RocketMQ takes any 8 bytes, apache/rocketmq#3015).
//!
//! The master's epoch history must cover every byte it serves: its first entry starts at
//! or below its min offset. The caller's "become master" step appends (epoch, max offset),
//! and when the history is empty, (epoch, min offset), claiming a log written before
//! replication. A master with no history is refused at the handshake. The reply carries
//! at most the newest [`EPOCHS_MAX`] entries (the most RocketMQ's reply buffer holds).

use super::epochs::EpochCache;
use super::wire::{
    FrameHeader, FromSlave, HandshakeReply, Refusal, RefusalReason, SlaveHandshake, EPOCHS_MAX,
    FRAME_BODY_MAX,
};

/// Who this master is, for checking a handshake.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MasterIdentity {
    pub cluster: String,
    pub broker: String,
    pub shard_index: u16,
    pub shard_count: u16,
}

/// The stream's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MasterSettings {
    /// The largest frame body (RocketMQ's `haTransferBatchSize`), at most
    /// [`FRAME_BODY_MAX`].
    pub batch_bytes: u32,
    /// The CommitLog segment size: frames never cross a segment's end.
    pub segment_bytes: u64,
    /// Send a heartbeat after this long without a frame (RocketMQ's
    /// `haSendHeartbeatInterval`, 5 s).
    pub heartbeat_interval_ms: u64,
}

/// The shard store's facts at the moment of a call.
#[derive(Clone, Copy, Debug)]
pub struct MasterLog<'a> {
    /// The oldest byte still retained.
    pub min_offset: u64,
    /// The end of what is written (sent before it is flushed, as RocketMQ does).
    pub max_offset: u64,
    /// What every in-sync replica holds; carried in each frame.
    pub confirm_offset: u64,
    pub epochs: &'a EpochCache,
}

/// Why the master ends the stream. [`MasterError::refusal`] is what to send first.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MasterError {
    #[error("cluster name mismatch: master is in '{master}', slave is in '{slave}'")]
    ClusterName { master: String, slave: String },
    #[error("broker name mismatch: master is '{master}', slave is '{slave}'")]
    BrokerName { master: String, slave: String },
    #[error("shard count mismatch: master has {master} shards, slave has {slave}")]
    ShardCount { master: u16, slave: u16 },
    #[error("stream for shard {slave} reached shard {master}")]
    ShardIndex { master: u16, slave: u16 },
    #[error("slave claims broker id 0, which is the master's")]
    BrokerIdZero,
    #[error("this master has no epoch history, so it cannot label what it sends")]
    NoEpochs,
    #[error(
        "slave reports offset {reported}, master has only {master_max}: \
         a forged offset, or a slave ahead of its master"
    )]
    ReportAboveMax { reported: u64, master_max: u64 },
    #[error("slave's ack went backwards: {reported} after {previous}")]
    AckBackwards { previous: u64, reported: u64 },
    #[error("slave acks {reported}, but only bytes up to {sent} were sent")]
    AckBeyondSent { reported: u64, sent: u64 },
    #[error(
        "slave fell below retention while streaming: next byte {next}, master min {master_min}"
    )]
    BelowRetention { next: u64, master_min: u64 },
    #[error("no epoch covers offset {offset}: the master's history starts at {first_start}")]
    NoEpochCovers { offset: u64, first_start: u64 },
    #[error("unexpected {what} while {phase}")]
    Unexpected {
        what: &'static str,
        phase: &'static str,
    },
    #[error("slave refused the stream ({reason:?}): {text}")]
    Refused { reason: RefusalReason, text: String },
}

impl MasterError {
    /// The refusal to send the slave before closing; `None` when the slave refused first.
    pub fn refusal(&self) -> Option<Refusal> {
        let reason = match self {
            MasterError::ClusterName { .. } => RefusalReason::ClusterName,
            MasterError::BrokerName { .. } => RefusalReason::BrokerName,
            MasterError::ShardCount { .. } | MasterError::ShardIndex { .. } => {
                RefusalReason::ShardCount
            }
            MasterError::BrokerIdZero => RefusalReason::BrokerIdZero,
            MasterError::NoEpochs | MasterError::NoEpochCovers { .. } => RefusalReason::NotAMaster,
            MasterError::ReportAboveMax { .. } | MasterError::AckBeyondSent { .. } => {
                RefusalReason::ForgedOffset
            }
            MasterError::AckBackwards { .. } => RefusalReason::AckBackwards,
            MasterError::BelowRetention { .. } => RefusalReason::OutOfOrder,
            MasterError::Unexpected { .. } => RefusalReason::BadInput,
            MasterError::Refused { .. } => return None,
        };
        Some(Refusal {
            reason,
            text: self.to_string(),
        })
    }
}

/// What the caller does after a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MasterEvent {
    /// Send this reply.
    Reply(HandshakeReply),
    /// The first report set the start point; frames go out from `from`.
    Started {
        from: u64,
        /// Set when the slave's offset was below the master's min offset: it restarts
        /// from the min and drops its log. Log it.
        below_retention: Option<BelowRetention>,
    },
    /// The slave holds every byte below `offset` (update the replica ack).
    Acked { offset: u64 },
}

/// A slave that fell below retention: what it reported and where it restarts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BelowRetention {
    pub reported: u64,
    pub master_min: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    AwaitHandshake,
    AwaitFirstReport { sync_from_last_file: bool },
    Streaming { next: u64, ack: u64 },
}

/// One stream's state on the master.
#[derive(Clone, Debug)]
pub struct MasterStream {
    identity: MasterIdentity,
    settings: MasterSettings,
    phase: Phase,
    /// When the last frame went out; `None` sends the next one at once.
    last_sent_ms: Option<u64>,
    slave_broker_id: Option<u64>,
}

impl MasterStream {
    pub fn new(identity: MasterIdentity, settings: MasterSettings) -> MasterStream {
        assert!(
            settings.batch_bytes as usize <= FRAME_BODY_MAX && settings.batch_bytes > 0,
            "batch {} outside 1..={FRAME_BODY_MAX}",
            settings.batch_bytes
        );
        assert!(settings.segment_bytes > 0, "segment size 0");
        assert!(
            identity.shard_index < identity.shard_count,
            "shard {} of {}",
            identity.shard_index,
            identity.shard_count
        );
        MasterStream {
            identity,
            settings,
            phase: Phase::AwaitHandshake,
            last_sent_ms: None,
            slave_broker_id: None,
        }
    }

    /// The slave's broker id, once its handshake is accepted.
    pub fn slave_broker_id(&self) -> Option<u64> {
        self.slave_broker_id
    }

    /// The slave's last ack, once streaming.
    pub fn ack_offset(&self) -> Option<u64> {
        match self.phase {
            Phase::Streaming { ack, .. } => Some(ack),
            _ => None,
        }
    }

    /// The next byte to send, once streaming.
    pub fn next_offset(&self) -> Option<u64> {
        match self.phase {
            Phase::Streaming { next, .. } => Some(next),
            _ => None,
        }
    }

    /// Handles one message from the slave. An error ends the stream: send its
    /// [`MasterError::refusal`], then close.
    pub fn on_message(
        &mut self,
        message: FromSlave,
        log: &MasterLog,
    ) -> Result<MasterEvent, MasterError> {
        match (message, self.phase) {
            (FromSlave::Refusal(refusal), _) => Err(MasterError::Refused {
                reason: refusal.reason,
                text: refusal.text,
            }),
            (FromSlave::Handshake(handshake), Phase::AwaitHandshake) => {
                self.on_handshake(handshake, log)
            }
            (
                FromSlave::Report(reported),
                Phase::AwaitFirstReport {
                    sync_from_last_file,
                },
            ) => self.start(reported, sync_from_last_file, log),
            (FromSlave::Report(reported), Phase::Streaming { next, ack }) => {
                self.on_ack(reported, next, ack)
            }
            (FromSlave::Handshake(_), phase) => Err(unexpected("handshake", phase)),
            (FromSlave::Report(_), phase) => Err(unexpected("report", phase)),
        }
    }

    fn on_handshake(
        &mut self,
        handshake: SlaveHandshake,
        log: &MasterLog,
    ) -> Result<MasterEvent, MasterError> {
        check_identity(&self.identity, &handshake)?;
        if log.epochs.is_empty() {
            return Err(MasterError::NoEpochs);
        }
        self.slave_broker_id = Some(handshake.slave_broker_id);
        self.phase = Phase::AwaitFirstReport {
            sync_from_last_file: handshake.sync_from_last_file,
        };
        Ok(MasterEvent::Reply(HandshakeReply {
            master_max: log.max_offset,
            epochs: newest_epochs(log.epochs),
        }))
    }

    fn start(
        &mut self,
        reported: u64,
        sync_from_last_file: bool,
        log: &MasterLog,
    ) -> Result<MasterEvent, MasterError> {
        if reported > log.max_offset {
            return Err(MasterError::ReportAboveMax {
                reported,
                master_max: log.max_offset,
            });
        }
        let mut below_retention = None;
        let from = if reported == 0 && sync_from_last_file {
            let last_segment = log.max_offset - log.max_offset % self.settings.segment_bytes;
            last_segment.max(log.min_offset)
        } else if reported < log.min_offset {
            if reported > 0 {
                below_retention = Some(BelowRetention {
                    reported,
                    master_min: log.min_offset,
                });
            }
            log.min_offset
        } else {
            reported
        };
        self.phase = Phase::Streaming {
            next: from,
            ack: reported,
        };
        // The first frame goes out at once, data or heartbeat: the slave learns where
        // it starts without waiting an interval.
        self.last_sent_ms = None;
        Ok(MasterEvent::Started {
            from,
            below_retention,
        })
    }

    fn on_ack(&mut self, reported: u64, next: u64, ack: u64) -> Result<MasterEvent, MasterError> {
        if reported < ack {
            return Err(MasterError::AckBackwards {
                previous: ack,
                reported,
            });
        }
        if reported > next {
            return Err(MasterError::AckBeyondSent {
                reported,
                sent: next,
            });
        }
        self.phase = Phase::Streaming {
            next,
            ack: reported,
        };
        Ok(MasterEvent::Acked { offset: reported })
    }

    /// What to send now, if anything: a frame header whose body is the log's bytes
    /// `[offset, offset + body_len)`, or a heartbeat (`body_len` 0). `next` advances past
    /// the frame as it is returned, so the caller sends every frame it gets, in order.
    pub fn next_frame(
        &mut self,
        log: &MasterLog,
        now_ms: u64,
    ) -> Result<Option<FrameHeader>, MasterError> {
        let Phase::Streaming { next, ack } = self.phase else {
            return Ok(None);
        };
        if next < log.min_offset {
            return Err(MasterError::BelowRetention {
                next,
                master_min: log.min_offset,
            });
        }
        assert!(
            next <= log.max_offset,
            "stream's next byte {next} past the master max {}: the log shrank under a stream",
            log.max_offset
        );
        let length = self.frame_length(next, log);
        let idle = self
            .last_sent_ms
            .is_none_or(|sent| now_ms.saturating_sub(sent) >= self.settings.heartbeat_interval_ms);
        if length == 0 && !idle {
            return Ok(None);
        }
        let (entry, _) = covering(log.epochs, next)?;
        self.last_sent_ms = Some(now_ms);
        self.phase = Phase::Streaming {
            next: next + length,
            ack,
        };
        Ok(Some(FrameHeader {
            offset: next,
            epoch: entry.epoch,
            epoch_start: entry.start,
            confirm_offset: log.confirm_offset,
            body_len: length as u32,
        }))
    }

    /// How many bytes the next frame carries: up to the written end, the batch, the
    /// segment's end and the epoch's end, whichever is nearest.
    fn frame_length(&self, next: u64, log: &MasterLog) -> u64 {
        let segment_end = (next / self.settings.segment_bytes + 1) * self.settings.segment_bytes;
        let epoch_end = log
            .epochs
            .covering(next)
            .and_then(|(_, end)| end)
            .unwrap_or(u64::MAX);
        let end = log
            .max_offset
            .min(segment_end)
            .min(epoch_end)
            .min(next + u64::from(self.settings.batch_bytes));
        assert!(end >= next, "frame end {end} before its start {next}");
        end - next
    }
}

/// The history for a reply: all of it, or its newest [`EPOCHS_MAX`] entries. Older ones
/// only matter to a slave whose newest shared epoch is that old; without them it finds no
/// consistent point and is refused, never truncated wrongly, since each kept entry's end
/// is still the next kept entry's start.
fn newest_epochs(epochs: &EpochCache) -> EpochCache {
    let entries = epochs.entries();
    let newest = &entries[entries.len().saturating_sub(EPOCHS_MAX)..];
    EpochCache::from_entries(newest).expect("a suffix of a valid history is valid")
}

fn covering(
    epochs: &EpochCache,
    offset: u64,
) -> Result<(super::epochs::EpochEntry, Option<u64>), MasterError> {
    epochs.covering(offset).ok_or(MasterError::NoEpochCovers {
        offset,
        first_start: epochs.entries().first().map_or(0, |entry| entry.start),
    })
}

fn check_identity(master: &MasterIdentity, slave: &SlaveHandshake) -> Result<(), MasterError> {
    if slave.cluster != master.cluster {
        return Err(MasterError::ClusterName {
            master: master.cluster.clone(),
            slave: slave.cluster.clone(),
        });
    }
    if slave.broker != master.broker {
        return Err(MasterError::BrokerName {
            master: master.broker.clone(),
            slave: slave.broker.clone(),
        });
    }
    if slave.shard_count != master.shard_count {
        return Err(MasterError::ShardCount {
            master: master.shard_count,
            slave: slave.shard_count,
        });
    }
    if slave.shard_index != master.shard_index {
        return Err(MasterError::ShardIndex {
            master: master.shard_index,
            slave: slave.shard_index,
        });
    }
    if slave.slave_broker_id == 0 {
        return Err(MasterError::BrokerIdZero);
    }
    Ok(())
}

fn unexpected(what: &'static str, phase: Phase) -> MasterError {
    let phase = match phase {
        Phase::AwaitHandshake => "waiting for the handshake",
        Phase::AwaitFirstReport { .. } => "waiting for the first report",
        Phase::Streaming { .. } => "streaming",
    };
    MasterError::Unexpected { what, phase }
}

#[cfg(test)]
#[path = "master_state_tests.rs"]
mod tests;
