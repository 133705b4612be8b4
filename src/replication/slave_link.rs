//! The slave's end of one shard's HA stream: connect to the master, hand [`SlaveStream`]
//! what arrives, and apply its plans to the store and the epoch history, in the plan's
//! order, before the next message.
//!
//! Before the handshake the store drops an incomplete record it may hold from an earlier
//! stream (the log then ends at a record boundary, which is what the consistent point and
//! the first report need). Reports carry what the store says the slave holds
//! ([`crate::store::replica::ReplicaProgress::ack`]: written whole records under
//! ASYNC_FLUSH, synced ones under SYNC_FLUSH), never bytes of a record still incomplete.
//!
//! The stream ends on any error after sending the refusal, if there is one; the caller
//! reconnects after a pause. Between streams nothing is written to the store.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::decode::{FromMasterDecoder, WireError};
use super::epoch_store::{EpochStore, EpochStoreError};
use super::epochs::{EpochCache, EpochError};
use super::slave_batch::Batch;
use super::slave_state::{SlaveError, SlaveIdentity, SlaveLog, SlavePlan, SlaveStream};
use super::wire::{encode_report, FromMaster, Refusal};
use crate::net::{Connection, Transport};
use crate::store::replica::{ReplicaAppendError, ReplicaStartError, ReplicaTruncateError};
use crate::store::Store;

/// The most bytes one read takes from the socket: 256 KiB is a few TCP windows' worth on
/// a local network, so a catching-up slave reads in few calls.
const READ_BYTES: usize = 256 * 1024;

/// What a slave shard's stream runs with.
#[derive(Clone, Debug)]
pub struct SlaveConfig {
    pub identity: SlaveIdentity,
    /// How often to report when nothing else prompts one (`haSendHeartbeatInterval`).
    pub heartbeat: Duration,
    /// A master silent this long is dropped (`haHousekeepingInterval`).
    pub housekeeping: Duration,
    /// `haSlaveBatchBytesMax`: a step closes once it appends this many bytes (see
    /// [`Batch`]), and the slave stops reading once this many bytes of frames are decoded
    /// and waiting for the step on the disk (the master's sends then wait in TCP). One
    /// step's worth, so the next step is ready in full when the disk is done.
    pub batch_bytes_max: usize,
}

/// Why a slave's stream ended.
#[derive(Debug, thiserror::Error)]
pub enum SlaveLinkError {
    #[error("cannot connect to the master at {addr}: {error}")]
    Connect {
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("the connection failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the master sent bytes that are not the HA wire: {0}")]
    Wire(#[from] WireError),
    #[error("{0}")]
    Stream(#[from] SlaveError),
    #[error(transparent)]
    Epochs(#[from] EpochStoreError),
    #[error("the epoch history cannot take the master's entry: {0}")]
    History(#[from] EpochError),
    #[error("appending the master's bytes: {0}")]
    Append(#[from] ReplicaAppendError),
    #[error("truncating to the consistent point: {0}")]
    Truncate(#[from] ReplicaTruncateError),
    #[error("restarting from the master's first offset: {0}")]
    Restart(#[from] ReplicaStartError),
    #[error("the master closed the stream")]
    Closed,
    /// Closed before any answer to the handshake: most often the address is not a
    /// master's HA port (a remoting port, a slave's, another program's), so say so.
    #[error(
        "{addr} closed the connection without answering the handshake: is it a ringmq \
         master's haListenPort?"
    )]
    ClosedUnanswered { addr: SocketAddr },
    #[error("nothing heard from the master for {0:?} (haHousekeepingInterval)")]
    Silent(Duration),
}

/// One slave shard's replication state.
pub struct SlaveSide {
    pub(super) store: Store,
    pub(super) epochs: EpochStore,
    pub(super) config: SlaveConfig,
    started: tokio::time::Instant,
    /// Whether a stream to the master is up (for status, metrics, and the shard's POP
    /// service, which serves on a slave only while it is down: [`SlaveSide::stream_flag`]).
    connected: Rc<std::cell::Cell<bool>>,
}

impl SlaveSide {
    pub fn new(store: Store, epochs: EpochStore, config: SlaveConfig) -> Rc<SlaveSide> {
        Rc::new(SlaveSide {
            store,
            epochs,
            config,
            started: tokio::time::Instant::now(),
            connected: Rc::new(std::cell::Cell::new(false)),
        })
    }

    /// Whether a stream to the master is up.
    pub fn connected(&self) -> bool {
        self.connected.get()
    }

    /// The flag [`SlaveSide::connected`] reads, shared with whoever must know.
    pub fn stream_flag(&self) -> Rc<std::cell::Cell<bool>> {
        self.connected.clone()
    }

    /// The slave's store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The store's facts for the state machine, with `history` the epochs in force.
    fn facts<'a>(&self, history: &'a EpochCache) -> SlaveLog<'a> {
        SlaveLog {
            min_offset: self.store.log_start(),
            max_offset: self.store.replica_progress().next_at,
            epochs: history,
        }
    }

    /// Runs one stream to `master` until it ends.
    pub async fn stream_from<T: Transport>(
        self: &Rc<Self>,
        transport: &T,
        master: SocketAddr,
    ) -> Result<(), SlaveLinkError> {
        let mut connection =
            transport
                .connect(master)
                .await
                .map_err(|error| SlaveLinkError::Connect {
                    addr: master,
                    error,
                })?;
        self.drop_incomplete_record().await?;
        let mut stream = SlaveStream::new(
            self.config.identity.clone(),
            u64::try_from(self.config.heartbeat.as_millis()).unwrap_or(u64::MAX),
        );
        let mut out = Vec::new();
        stream.handshake().encode(&mut out);
        connection.write_all(&out).await?;
        self.connected.set(true);
        let result = match self.run(&mut connection, &mut stream).await {
            Err(SlaveLinkError::Closed) if !stream.answered() => {
                Err(SlaveLinkError::ClosedUnanswered { addr: master })
            }
            result => result,
        };
        self.connected.set(false);
        if stream.answered() {
            // A stream that got going ends here whatever the reason (the service logs a
            // failure to connect only when its reason changes).
            let reason = result.as_ref().err().map(ToString::to_string);
            tracing::info!(
                shard = self.config.identity.shard_index,
                %master,
                ack = self.store.replica_progress().ack,
                "slave stream to its master ended: {}",
                reason.as_deref().unwrap_or("stopped")
            );
        }
        if let Err(SlaveLinkError::Stream(error)) = &result {
            if let Some(refusal) = error.refusal() {
                send_refusal(&mut connection, &refusal).await;
            }
        }
        result
    }

    /// A record left incomplete by an earlier stream is cut: the log ends at a record.
    async fn drop_incomplete_record(&self) -> Result<(), SlaveLinkError> {
        let progress = self.store.replica_progress();
        if progress.next_at > progress.records_end {
            self.store.truncate_replica(progress.records_end).await?;
        }
        Ok(())
    }

    async fn run<C: Connection>(
        &self,
        connection: &mut C,
        stream: &mut SlaveStream,
    ) -> Result<(), SlaveLinkError> {
        let mut decoder = FromMasterDecoder::new();
        let mut queue = Received::new(self.config.batch_bytes_max);
        let mut buffer = vec![0u8; READ_BYTES];
        let mut heard = tokio::time::Instant::now();
        let mut reported_once = false;
        // The step on the disk now: at most one, and the socket is read meanwhile.
        let mut applying: Option<Pin<Box<dyn Future<Output = Applied> + '_>>> = None;
        loop {
            queue.take_from(&mut decoder)?;
            if applying.is_none() {
                let batch = self.next_batch(stream, &mut queue)?;
                if !batch.is_empty() {
                    applying = Some(Box::pin(self.apply_batch(batch)));
                } else {
                    let history = self.epochs.history();
                    if let Some(offset) = stream.report_due(&self.facts(&history), self.now_ms()) {
                        self.report(connection, offset, &mut reported_once).await?;
                    }
                }
            }
            let space = match queue.full() {
                true => 0,
                false => decoder.space().min(buffer.len()),
            };
            tokio::select! {
                applied = until_applied(&mut applying) => {
                    applying = None;
                    if let Some(planned) = applied? {
                        self.report(connection, planned, &mut reported_once).await?;
                    }
                }
                read = connection.read(&mut buffer[..space]), if space > 0 => match read? {
                    0 => {
                        decoder.finish()?;
                        return Err(SlaveLinkError::Closed);
                    }
                    n => {
                        decoder.feed(&buffer[..n])?;
                        heard = tokio::time::Instant::now();
                    }
                },
                _ = tokio::time::sleep(self.config.heartbeat) => {}
                _ = tokio::time::sleep_until(heard + self.config.housekeeping) => {
                    return Err(SlaveLinkError::Silent(self.config.housekeeping));
                }
            }
        }
    }

    /// The next step: the plans for the messages received so far, decided in order, each
    /// on the facts the store will have once the plans before it are applied (only the
    /// log's end moves inside a step, see [`Batch`]).
    fn next_batch(
        &self,
        stream: &mut SlaveStream,
        queue: &mut Received,
    ) -> Result<Batch, SlaveLinkError> {
        let history = self.epochs.history();
        let mut batch = Batch::new(
            self.store.config().commit_log_segment_size,
            self.config.batch_bytes_max,
        );
        while !batch.is_closed() {
            let Some(message) = queue.pop() else { break };
            let reply = matches!(message, FromMaster::Reply(_));
            let mut facts = self.facts(&history);
            if let Some(end) = batch.log_end() {
                facts.max_offset = end;
            }
            batch.push(stream.on_message(message, &facts, self.now_ms())?);
            if reply {
                // The start point is reported alone, before any frame is taken.
                batch.close();
            }
        }
        Ok(batch)
    }

    /// Applies a step's plans in order; returns the offset to report, if any plan asks.
    async fn apply_batch(&self, batch: Batch) -> Applied {
        let report = batch.reports().then(|| batch.first_report()).flatten();
        for plan in batch.into_plans() {
            self.apply(plan).await?;
        }
        Ok(report)
    }

    /// Applies one plan in its order.
    async fn apply(&self, plan: SlavePlan) -> Result<(), SlaveLinkError> {
        let shard = self.config.identity.shard_index;
        if let Some(to) = plan.truncate_to {
            let truncated = self.store.truncate_replica(to).await?;
            let mut history = self.epochs.history();
            history.truncate_from(to);
            self.epochs.save(history).await?;
            tracing::warn!(
                shard,
                from = truncated.from,
                to,
                "slave log truncated to the point its master's log agrees with"
            );
        }
        if let Some(at) = plan.restart_at {
            tracing::warn!(
                shard,
                at,
                "the master restarts this slave from its first offset"
            );
            self.epochs.save(EpochCache::new()).await?;
            self.store.restart_replica_at(at).await?;
        }
        if let Some(entry) = plan.append_epoch {
            let mut history = self.epochs.history();
            history.append(entry)?;
            self.epochs.save(history).await?;
        }
        if let Some(append) = plan.append {
            self.store
                .append_replica(append.offset, Bytes::from(append.body))
                .await?;
        }
        Ok(())
    }

    /// Sends a report: the plan's offset the first time (the stream's start point), then
    /// what the store holds.
    async fn report<C: Connection>(
        &self,
        connection: &mut C,
        planned: u64,
        reported_once: &mut bool,
    ) -> Result<(), SlaveLinkError> {
        let offset = match *reported_once {
            false => {
                tracing::info!(
                    shard = self.config.identity.shard_index,
                    from = planned,
                    "slave streaming from its master"
                );
                planned
            }
            true => self.store.replica_progress().ack,
        };
        *reported_once = true;
        let mut out = Vec::new();
        encode_report(offset, &mut out);
        connection.write_all(&out).await?;
        Ok(())
    }
}

/// What a step ends with: the offset to report (the stream's start point the first time;
/// after that the report says what the store holds).
type Applied = Result<Option<u64>, SlaveLinkError>;

/// Resolves when the step on the disk is applied; never while there is none.
async fn until_applied(
    applying: &mut Option<Pin<Box<dyn Future<Output = Applied> + '_>>>,
) -> Applied {
    match applying.as_mut() {
        Some(step) => step.await,
        None => std::future::pending().await,
    }
}

/// Messages decoded and not yet planned, and how many bytes of frames they hold.
struct Received {
    messages: VecDeque<FromMaster>,
    bytes: usize,
    /// Frame bytes past which the slave stops reading ([`SlaveConfig::batch_bytes_max`]).
    read_ahead: usize,
}

impl Received {
    fn new(read_ahead: usize) -> Received {
        Received {
            messages: VecDeque::new(),
            bytes: 0,
            read_ahead,
        }
    }

    /// Takes every whole message the decoder holds, while there is room.
    fn take_from(&mut self, decoder: &mut FromMasterDecoder) -> Result<(), WireError> {
        while !self.full() {
            let Some(message) = decoder.next()? else {
                break;
            };
            self.bytes += frame_bytes(&message);
            self.messages.push_back(message);
        }
        Ok(())
    }

    fn pop(&mut self) -> Option<FromMaster> {
        let message = self.messages.pop_front()?;
        self.bytes -= frame_bytes(&message);
        Some(message)
    }

    /// Whether the slave stops reading: the disk is behind by the read-ahead and the
    /// master's frames wait in the socket (TCP's window tells the master). Below it a whole
    /// message is always taken, so a frame larger than the read-ahead still comes in.
    fn full(&self) -> bool {
        self.bytes >= self.read_ahead
    }
}

fn frame_bytes(message: &FromMaster) -> usize {
    match message {
        FromMaster::Frame(frame) => frame.body.len(),
        _ => 0,
    }
}

/// Tells the master why the stream ends; a failure to is of no consequence.
async fn send_refusal<C: Connection>(connection: &mut C, refusal: &Refusal) {
    let mut out = Vec::new();
    refusal.encode(&mut out);
    let _ = connection.write_all(&out).await;
}
