//! The slave's side of one shard's HA stream as pure decisions: the I/O service feeds it
//! decoded messages ([`super::decode::FromMasterDecoder`]) and the shard store's facts as
//! plain numbers ([`SlaveLog`]), and applies the [`SlavePlan`] it answers, in the plan's
//! field order, before feeding the next message.
//!
//! The stream goes handshake → reply (find the consistent point, truncate, report it) →
//! frames. Rules:
//! - on the reply, the truncation point is [`find_consistent_point`] of the local and the
//!   master's histories (reference-2 §6.4); no point is refused, naming both histories,
//!   and only an operator can choose which log to keep;
//! - an empty local history with an empty log reports 0 and truncates nothing (RocketMQ's
//!   rule); an empty history with data is refused ([`SlaveError::DataWithoutEpochs`]),
//!   where RocketMQ would report its max and splice if the bytes differ: nothing proves
//!   those bytes are the master's, so the operator empties the store or restores its
//!   epoch file;
//! - every frame starts at the local max offset, else the stream closes. One exception:
//!   the stream's first frame may start past the local max, which is the master
//!   restarting this slave from its min offset (the slave fell below retention, or is
//!   empty and reported 0); the plan says so and the log and history are dropped;
//! - epochs: a frame of the local last epoch must name the same start; a frame of a newer
//!   epoch must start exactly at that epoch's start (the master cuts frames at epoch
//!   boundaries, so a newer epoch that started earlier means the local bytes in between
//!   are another master's), and its data appends the entry; an older epoch is refused.
//!   Heartbeats are checked the same way but append nothing: an entry labels bytes, and a
//!   heartbeat carries none;
//! - confirm offset = min(frame's confirm offset, local max after the frame);
//! - a report goes out after the reply (the truncation point), after every frame that grew
//!   the log, and when [`SlaveStream::report_due`] says the interval passed.

use super::epochs::{find_consistent_point, EpochCache, EpochEntry};
use super::wire::{
    FromMaster, HandshakeReply, Refusal, RefusalReason, SlaveHandshake, TransferFrame,
};

/// Who this slave is: the handshake's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlaveIdentity {
    pub cluster: String,
    pub broker: String,
    pub shard_index: u16,
    pub shard_count: u16,
    pub slave_broker_id: u64,
    pub sync_from_last_file: bool,
    pub async_learner: bool,
}

/// The shard store's facts at the moment of a call, after every earlier plan was applied.
#[derive(Clone, Copy, Debug)]
pub struct SlaveLog<'a> {
    /// The oldest byte held; equal to `max_offset` when the log is empty.
    pub min_offset: u64,
    /// The end of the log: the next byte the slave needs.
    pub max_offset: u64,
    pub epochs: &'a EpochCache,
}

/// Bytes to append at `offset`, which is the local max once earlier steps are done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Append {
    pub offset: u64,
    pub body: Vec<u8>,
}

/// What the caller does, in this order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlavePlan {
    /// Truncate the log to this offset (nothing to do when it ends there), then the
    /// history with [`EpochCache::truncate_from`] at it (CommitLog, ConsumeQueues, index).
    pub truncate_to: Option<u64>,
    /// Drop the whole log and history: the store starts empty at this offset. Log it:
    /// the master restarted this slave from its min offset.
    pub restart_at: Option<u64>,
    /// Append this entry to the history (and persist the epoch file) before the bytes.
    pub append_epoch: Option<EpochEntry>,
    pub append: Option<Append>,
    /// Set the replica's confirm offset (what the slave may dispatch up to).
    pub confirm_offset: Option<u64>,
    /// Send a report of this offset.
    pub report: Option<u64>,
}

/// Why the slave ends the stream. [`SlaveError::refusal`] is what to send first.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SlaveError {
    #[error(
        "the local log holds bytes {local_min}..{local_max} but no epoch history, so nothing \
         proves they are the master's: empty this shard's store or restore its epoch file"
    )]
    DataWithoutEpochs { local_min: u64, local_max: u64 },
    #[error(
        "no consistent point: local epochs {local} share no epoch with the same start with \
         the master's {master}; an operator must choose which log to keep"
    )]
    NoConsistentPoint { local: String, master: String },
    #[error("frame at {offset} does not continue the local log, which ends at {local_max}")]
    OffsetMismatch { offset: u64, local_max: u64 },
    #[error("frame of epoch {frame} is older than the local last epoch {local}")]
    EpochBackwards { local: u32, frame: u32 },
    #[error(
        "frame says epoch {epoch} starts at {frame_start}, the local history says {local_start}"
    )]
    EpochStartMismatch {
        epoch: u32,
        local_start: u64,
        frame_start: u64,
    },
    #[error(
        "frame at {offset} is in new epoch {epoch} starting earlier, at {start}: the local \
         bytes between are another epoch's"
    )]
    NewEpochNotAtOffset { epoch: u32, start: u64, offset: u64 },
    #[error("unexpected {what} while {phase}")]
    Unexpected {
        what: &'static str,
        phase: &'static str,
    },
    #[error("master refused the stream ({reason:?}): {text}")]
    Refused { reason: RefusalReason, text: String },
}

impl SlaveError {
    /// The refusal to send the master before closing; `None` when the master refused.
    pub fn refusal(&self) -> Option<Refusal> {
        let reason = match self {
            SlaveError::DataWithoutEpochs { .. } => RefusalReason::DataWithoutEpochs,
            SlaveError::NoConsistentPoint { .. } => RefusalReason::NoConsistentPoint,
            SlaveError::OffsetMismatch { .. }
            | SlaveError::EpochBackwards { .. }
            | SlaveError::EpochStartMismatch { .. }
            | SlaveError::NewEpochNotAtOffset { .. } => RefusalReason::OutOfOrder,
            SlaveError::Unexpected { .. } => RefusalReason::BadInput,
            SlaveError::Refused { .. } => return None,
        };
        Some(Refusal {
            reason,
            text: self.to_string(),
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    AwaitReply,
    Streaming { first_frame: bool },
}

/// One stream's state on the slave.
#[derive(Clone, Debug)]
pub struct SlaveStream {
    identity: SlaveIdentity,
    report_interval_ms: u64,
    phase: Phase,
    last_reported: u64,
    last_report_ms: Option<u64>,
}

impl SlaveStream {
    /// `report_interval_ms`: report at least this often (RocketMQ's
    /// `haSendHeartbeatInterval`, 5 s), so the master's housekeeping sees a live slave.
    pub fn new(identity: SlaveIdentity, report_interval_ms: u64) -> SlaveStream {
        assert!(
            identity.shard_index < identity.shard_count,
            "shard {} of {}",
            identity.shard_index,
            identity.shard_count
        );
        SlaveStream {
            identity,
            report_interval_ms,
            phase: Phase::AwaitReply,
            last_reported: 0,
            last_report_ms: None,
        }
    }

    /// Whether the master answered the handshake: a stream closed before is one that
    /// reached something other than a master's HA port, most likely.
    pub fn answered(&self) -> bool {
        self.phase != Phase::AwaitReply
    }

    /// The first message of the stream.
    pub fn handshake(&self) -> SlaveHandshake {
        let identity = &self.identity;
        SlaveHandshake {
            sync_from_last_file: identity.sync_from_last_file,
            async_learner: identity.async_learner,
            slave_broker_id: identity.slave_broker_id,
            shard_index: identity.shard_index,
            shard_count: identity.shard_count,
            cluster: identity.cluster.clone(),
            broker: identity.broker.clone(),
        }
    }

    /// Handles one message from the master. An error ends the stream: send its
    /// [`SlaveError::refusal`], then close.
    pub fn on_message(
        &mut self,
        message: FromMaster,
        log: &SlaveLog,
        now_ms: u64,
    ) -> Result<SlavePlan, SlaveError> {
        let plan = match (message, self.phase) {
            (FromMaster::Refusal(refusal), _) => {
                return Err(SlaveError::Refused {
                    reason: refusal.reason,
                    text: refusal.text,
                })
            }
            (FromMaster::Reply(reply), Phase::AwaitReply) => self.on_reply(&reply, log)?,
            (FromMaster::Frame(frame), Phase::Streaming { first_frame }) => {
                self.on_frame(frame, first_frame, log)?
            }
            (FromMaster::Reply(_), _) => return Err(self.unexpected("handshake reply")),
            (FromMaster::Frame(_), _) => return Err(self.unexpected("frame")),
        };
        if plan.report.is_some() {
            self.last_report_ms = Some(now_ms);
        }
        Ok(plan)
    }

    /// A keepalive report of the local max, when the interval passed since the last one.
    pub fn report_due(&mut self, log: &SlaveLog, now_ms: u64) -> Option<u64> {
        let Phase::Streaming { .. } = self.phase else {
            return None;
        };
        let last = self.last_report_ms?;
        if now_ms.saturating_sub(last) < self.report_interval_ms {
            return None;
        }
        assert!(
            log.max_offset >= self.last_reported,
            "local log shrank to {} under a stream that reported {}",
            log.max_offset,
            self.last_reported
        );
        self.last_reported = log.max_offset;
        self.last_report_ms = Some(now_ms);
        Some(log.max_offset)
    }

    fn on_reply(
        &mut self,
        reply: &HandshakeReply,
        log: &SlaveLog,
    ) -> Result<SlavePlan, SlaveError> {
        let point = if log.epochs.is_empty() {
            if log.max_offset > log.min_offset {
                return Err(SlaveError::DataWithoutEpochs {
                    local_min: log.min_offset,
                    local_max: log.max_offset,
                });
            }
            // An empty store: report 0, and the master chooses where it starts.
            0
        } else if log.max_offset == log.min_offset {
            // A store holding no byte under epochs of its own (it became master and wrote
            // nothing): nothing to agree on. Its end, and the entries go with the
            // truncation there. RocketMQ finds no consistent point and refuses for good: a
            // shard left empty while its node was master never followed again (found with
            // two shards per node under faults).
            log.max_offset
        } else {
            find_consistent_point(log.epochs, log.max_offset, &reply.epochs, reply.master_max)
                .ok_or_else(|| SlaveError::NoConsistentPoint {
                    local: describe(log.epochs, log.max_offset),
                    master: describe(&reply.epochs, reply.master_max),
                })?
        };
        self.phase = Phase::Streaming { first_frame: true };
        self.last_reported = point;
        let truncate_to = (!log.epochs.is_empty()).then_some(point);
        Ok(SlavePlan {
            truncate_to,
            report: Some(point),
            ..SlavePlan::default()
        })
    }

    fn on_frame(
        &mut self,
        frame: TransferFrame,
        first_frame: bool,
        log: &SlaveLog,
    ) -> Result<SlavePlan, SlaveError> {
        let header = frame.header;
        let restart = header.offset != log.max_offset;
        if restart && !(first_frame && header.offset > log.max_offset) {
            return Err(SlaveError::OffsetMismatch {
                offset: header.offset,
                local_max: log.max_offset,
            });
        }
        // After a restart the history is dropped with the log.
        let last = if restart { None } else { log.epochs.last() };
        let new_epoch = check_epoch(last, header.epoch, header.epoch_start, header.offset)?;
        self.phase = Phase::Streaming { first_frame: false };
        let end = header.offset + frame.body.len() as u64;
        let mut plan = SlavePlan {
            restart_at: restart.then_some(header.offset),
            confirm_offset: Some(header.confirm_offset.min(end)),
            ..SlavePlan::default()
        };
        if !frame.body.is_empty() {
            plan.append_epoch = new_epoch;
            plan.append = Some(Append {
                offset: header.offset,
                body: frame.body,
            });
        }
        if end > self.last_reported || restart {
            self.last_reported = end;
            plan.report = Some(end);
        }
        Ok(plan)
    }

    fn unexpected(&self, what: &'static str) -> SlaveError {
        let phase = match self.phase {
            Phase::AwaitReply => "waiting for the handshake reply",
            Phase::Streaming { .. } => "streaming",
        };
        SlaveError::Unexpected { what, phase }
    }
}

/// Checks a frame's epoch against the local last entry; the entry to append when the
/// frame opens a newer epoch.
fn check_epoch(
    last: Option<EpochEntry>,
    epoch: u32,
    start: u64,
    offset: u64,
) -> Result<Option<EpochEntry>, SlaveError> {
    let entry = EpochEntry { epoch, start };
    let Some(last) = last else {
        // An empty history (an empty or restarted log): the frame's epoch labels it.
        return Ok(Some(entry));
    };
    if epoch < last.epoch {
        return Err(SlaveError::EpochBackwards {
            local: last.epoch,
            frame: epoch,
        });
    }
    if epoch == last.epoch {
        if start != last.start {
            return Err(SlaveError::EpochStartMismatch {
                epoch,
                local_start: last.start,
                frame_start: start,
            });
        }
        return Ok(None);
    }
    if start != offset {
        return Err(SlaveError::NewEpochNotAtOffset {
            epoch,
            start,
            offset,
        });
    }
    Ok(Some(entry))
}

/// `[1@0, 2@1000] (max 1500)`: a history for a refusal text.
fn describe(history: &EpochCache, max_offset: u64) -> String {
    let entries: Vec<String> = history
        .entries()
        .iter()
        .map(|entry| format!("{}@{}", entry.epoch, entry.start))
        .collect();
    format!("[{}] (max {max_offset})", entries.join(", "))
}

#[cfg(test)]
#[path = "slave_state_tests.rs"]
mod tests;
