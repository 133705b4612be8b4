//! The master's end of one slave's HA stream on one shard: the socket and the store around
//! [`MasterStream`], which decides everything.
//!
//! One task per stream, in a loop: decode what the slave sent and act on it (reply to the
//! handshake, note the start point, record acks in [`super::master_side::MasterSide`]);
//! send the frames the state machine gives, their bodies read from the store
//! ([`Store::replica_range`], never past the written end, never across a segment), in one
//! write of about `haSendBatchBytes`; then wait for the first of: bytes from the slave,
//! new bytes written to the log, more frames due (a backlog goes out a write per turn),
//! the heartbeat due, or the housekeeping deadline (a slave silent that long is dropped).
//!
//! Frames go out once written, before they are flushed (RocketMQ does the same): under
//! SYNC_MASTER a put waits for the slave, and the slave's copy is what makes it safe.
//!
//! A stream error ends the stream after the refusal (if any) is sent; the slave
//! reconnects and the handshake finds the consistent point again. Nothing here can stall
//! the shard: writes to a slave that does not read wait on this task only.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::decode::{FromSlaveDecoder, WireError};
use super::master_side::MasterSide;
use super::master_state::{MasterError, MasterEvent, MasterLog, MasterStream};
use super::wire::Refusal;
use crate::net::Connection;
use crate::store::replica::ReplicaRangeError;

/// Why a stream ended.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("the connection failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the peer sent bytes that are not the HA wire: {0}")]
    Wire(#[from] WireError),
    #[error("{0}")]
    Master(#[from] MasterError),
    #[error("the store cannot serve the stream: {0}")]
    Range(#[from] ReplicaRangeError),
    #[error("the peer closed the stream")]
    Closed,
    #[error("nothing heard from the peer for {0:?} (haHousekeepingInterval)")]
    Silent(Duration),
    #[error("the frame at {offset} should carry {planned} bytes, the store has {found}")]
    ShortRange {
        offset: u64,
        planned: u32,
        found: usize,
    },
}

/// Serves one slave on `connection` until the stream ends; `already` are bytes read
/// before (the handshake, when another shard accepted the connection).
pub async fn serve_slave<C: Connection>(
    side: Rc<MasterSide>,
    mut connection: C,
    peer: SocketAddr,
    already: Vec<u8>,
) -> Result<(), LinkError> {
    let link = side.open_link(peer);
    let mut stream = MasterStream::new(side.identity.clone(), side.stream_settings);
    let mut decoder = FromSlaveDecoder::new();
    decoder.feed(&already)?;
    let result = run(&side, &mut connection, &mut stream, &mut decoder, link).await;
    side.close_link(link);
    if let Err(LinkError::Master(error)) = &result {
        if let Some(refusal) = error.refusal() {
            send_refusal(&mut connection, &refusal).await;
        }
    }
    result
}

async fn run<C: Connection>(
    side: &MasterSide,
    connection: &mut C,
    stream: &mut MasterStream,
    decoder: &mut FromSlaveDecoder,
    link: u64,
) -> Result<(), LinkError> {
    let mut buffer = vec![0u8; 4096];
    let mut heard = tokio::time::Instant::now();
    loop {
        while let Some(message) = decoder.next()? {
            let event = stream.on_message(message, &side.log_facts())?;
            let slave_id = stream.slave_broker_id();
            act(side, connection, (link, slave_id), event).await?;
        }
        // Made before the frames are sent: a put written while a send awaits wakes it.
        let written = side.store.log_written();
        let more = send_frames(side, connection, stream).await?;
        let silent_until = heard + side.housekeeping;
        tokio::select! {
            // A backlog goes out a write at a time, reading the slave's acks between.
            _ = std::future::ready(()), if more => {}
            read = connection.read(&mut buffer[..decoder.space().min(4096)]) => match read? {
                0 => {
                    decoder.finish()?;
                    return Err(LinkError::Closed);
                }
                n => {
                    decoder.feed(&buffer[..n])?;
                    heard = tokio::time::Instant::now();
                }
            },
            _ = written => {}
            _ = tokio::time::sleep(side.heartbeat) => {}
            _ = tokio::time::sleep_until(silent_until) => {
                return Err(LinkError::Silent(side.housekeeping));
            }
        }
    }
}

/// Does what one event from the state machine asks.
async fn act<C: Connection>(
    side: &MasterSide,
    connection: &mut C,
    (link, slave_id): (u64, Option<u64>),
    event: MasterEvent,
) -> Result<(), LinkError> {
    match event {
        MasterEvent::Reply(reply) => {
            let mut out = Vec::new();
            reply.encode(&mut out);
            connection.write_all(&out).await?;
        }
        MasterEvent::Started {
            from,
            below_retention,
        } => {
            if let Some(below) = below_retention {
                tracing::warn!(
                    shard = side.identity.shard_index,
                    reported = below.reported,
                    master_min = below.master_min,
                    "a slave's log ends below this master's retention: it starts again from {}",
                    below.master_min
                );
            }
            side.started(link, from, slave_id);
        }
        MasterEvent::Acked { offset } => side.acked(link, offset),
    }
    Ok(())
}

/// Sends the frames the state machine has now, each header followed by its body, in one
/// write of about `haSendBatchBytes` (the frame that reaches it is the write's last, so a
/// write carries at least one whole frame): one write per wakeup for the frames of a put
/// batch, not two per frame (the slave wakes once, not for a lone 36-byte header). Returns
/// whether more may wait (a backlog): the caller reads what the slave sent before the next
/// write, so a slave catching up a long log is heard from, acks and all.
async fn send_frames<C: Connection>(
    side: &MasterSide,
    connection: &mut C,
    stream: &mut MasterStream,
) -> Result<bool, LinkError> {
    let mut out = Vec::new();
    let now = side.now_ms();
    while let Some(header) = stream.next_frame(&side.log_facts(), now)? {
        header.encode(&mut out);
        if header.body_len > 0 {
            let range = side
                .store
                .replica_range(header.offset, header.body_len as usize)?
                .filter(|range| {
                    range.start == header.offset && range.bytes.len() == header.body_len as usize
                })
                .ok_or(LinkError::ShortRange {
                    offset: header.offset,
                    planned: header.body_len,
                    found: 0,
                })?;
            out.extend_from_slice(&range.bytes);
            side.sent(header.body_len);
        }
        if out.len() >= side.send_bytes {
            connection.write_all(&out).await?;
            return Ok(true);
        }
    }
    if !out.is_empty() {
        connection.write_all(&out).await?;
    }
    Ok(false)
}

/// Tells the slave why the stream ends; a failure to is of no consequence (it closes).
async fn send_refusal<C: Connection>(connection: &mut C, refusal: &Refusal) {
    let mut out = Vec::new();
    refusal.encode(&mut out);
    let _ = connection.write_all(&out).await;
}

/// The store's facts for the state machine, as plain numbers.
pub(super) fn facts<'a>(
    store: &crate::store::Store,
    confirm_offset: u64,
    epochs: &'a super::epochs::EpochCache,
) -> MasterLog<'a> {
    MasterLog {
        min_offset: store.log_start(),
        max_offset: store.log_positions().written,
        confirm_offset,
        epochs,
    }
}
