//! The embedded message store of one shard: CommitLog, ConsumeQueues, flush, checkpoint
//! and recovery (D2 to D11).
//!
//! ```text
//!   <dir>/
//!     commitlog/00000000000000000000 ...      records, all topics mixed   (commit_log.rs)
//!     consumequeue/<topic>/<queueId>/000...   20-byte entries per queue   (consume_queue.rs)
//!     index/20261202061234567 ...             keys → records, by time     (index.rs)
//!     checkpoint                              safe offset, two slots      (checkpoint.rs)
//!     abort                                   present while the store is open
//!     lock                                    locked while the store is open (Disk::lock)
//! ```
//!
//! The write path: [`Store::put`] validates and queues the message; the appender task
//! (`append.rs`) takes everything queued as one batch and runs it through three stages.
//! It encodes the batch (assigning queue offset, physical offset and store time),
//! registers it as one waiter at its end offset in the queue of waiters (`waiters.rs`)
//! and writes it with one write; under SYNC_FLUSH it makes it durable with one fdatasync
//! in the same turn (group commit); then it releases every waiter whose end the required
//! acknowledgement conditions (written under ASYNC_FLUSH, flushed under SYNC_FLUSH, and
//! under SYNC_MASTER also the replication watermark, [`Store::confirm_replicated`], D14)
//! have all reached: ConsumeQueue entries and index keys (visible, `dispatch.rs`, the one
//! function recovery uses too), then the answers, whose [`PutStatus`] says which condition
//! a put did not get. Under ASYNC_FLUSH the flusher task syncs in the background. The
//! checkpointer task periodically writes the ConsumeQueues out, syncs them and records the
//! safe offset recovery starts from.
//!
//! The cleaner task (`retention.rs`) deletes expired segments, keeping what the holders
//! registered through the retention-hold seam (`retention_holds.rs`) still need.
//!
//! A store is a master or a replica ([`replica::StoreRole`]: a SLAVE's store opens as a
//! replica, [`Store::set_role`] switches). A master's log is written by puts; a replica's
//! by byte ranges of its master's log, so it is byte-identical to its master per shard
//! (physical offsets carry the shard id, D4, and mean the same on both):
//!
//! ```text
//!   master: puts ─▶ appender ─▶ CommitLog ─▶ replica_range(next, cap)  (replica_source.rs)
//!                                                 │ frames (HA stream)
//!   replica:  append_replica(at, bytes) ◀─────────┘                    (replica.rs)
//!             check (replica_verify.rs) ─▶ write ─▶ durable ─▶ dispatch (dispatch.rs)
//!             start_replica_at(base), truncate_replica(to)             (replica_cut.rs)
//! ```
//!
//! Replica invariants: puts are refused ([`StoreError::Replica`]) and a master refuses
//! frames; a frame starts where the last ended and stays in one segment; the CommitLog's
//! positions (written, flushed, the checkpoint's safe offset) and what is visible stay at
//! whole records, each checked as recovery checks them before it is written and
//! dispatched by the one dispatch function; an incomplete record at a frame's end is
//! written (byte identity) but never visible, and recovery or a stop cuts it; a refused
//! record's bytes are zeroed; a truncation is recovery's cut at a chosen offset, made
//! durable. What a replica reports to its master is [`replica::ReplicaProgress::ack`].
//!
//! Every one of these tasks runs under watch (`watch.rs`): a panic poisons the store with
//! its message, like a failed write (D11), instead of leaving the shard up with nobody
//! writing.
//!
//! A store and everything in it belongs to one thread: run it inside a tokio `LocalSet`.

mod abandon;
mod append;
pub mod checkpoint;
pub mod commit_log;
pub mod confirm_timing;
pub mod consume_queue;
mod dispatch;
mod flush;
mod gather;
pub mod index;
pub mod index_file;
pub mod inspect;
mod inspect_guard;
pub mod position;
pub mod properties;
mod put_slot;
pub mod query;
pub mod read;
pub mod record;
mod recovery;
pub mod replica;
mod replica_cut;
pub mod replica_gate;
mod replica_source;
mod replica_verify;
pub mod retention;
pub mod retention_holds;
pub mod scan;
pub mod segment;
pub mod topic;
mod waiters;
mod watch;
pub mod write_lease;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::clock::Clock;
use crate::config::{FlushMode, StoreConfig};
use crate::io::{Disk, IoStats};
pub use abandon::AbandonOnDrop;
use checkpoint::CheckpointFile;
use commit_log::CommitLog;
use consume_queue::{ConsumeQueue, CqEntry};
use position::{to_u32, to_u64};
pub use position::{LogPos, QueueOffset};
pub use put_slot::PutDone;
pub use read::{PullRead, RecordLoc};
use record::{Decoded, RecordInput, Verify};
pub use replica_gate::ReplicaGate;
pub use watch::{StoreTask, Watched};
pub use write_lease::WriteLease;

pub const COMMIT_LOG_DIR: &str = "commitlog";
pub const CONSUME_QUEUE_DIR: &str = "consumequeue";
pub const ABORT_FILE: &str = "abort";
pub const LOCK_FILE: &str = "lock";

/// Why the store refused or failed an operation. Every variant names its cause.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    #[error("the store refuses writes after a failure: {0}")]
    Poisoned(String),
    #[error("disk full: {0}")]
    DiskFull(String),
    #[error("message illegal: {0}")]
    MessageIllegal(String),
    #[error(
        "this broker's write lease from the controllers lapsed: it may no longer be the \
         master; ask the name servers for the route again"
    )]
    LeaseLapsed,
    #[error("store busy: {0} puts are already waiting")]
    Busy(usize),
    #[error("the store is shutting down")]
    ShuttingDown,
    #[error("I/O error: {0}")]
    Io(String),
    #[error("invalid store config: {0}")]
    Config(String),
    #[error("store data is inconsistent: {0}")]
    Corrupt(String),
    #[error("store directory {0} is in use by another process")]
    Locked(String),
    /// The store is a replica: its log is written by its master's stream
    /// ([`Store::append_replica`]), never by puts (RocketMQ's slave refuses sends).
    #[error("the store is a replica: puts are refused, its log follows its master's")]
    Replica,
}

impl StoreError {
    pub(crate) fn from_io(context: &str, error: &std::io::Error) -> StoreError {
        if error.raw_os_error() == Some(libc::ENOSPC) {
            StoreError::DiskFull(format!("{context}: {error}"))
        } else {
            StoreError::Io(format!("{context}: {error}"))
        }
    }
}

/// How a stored message was acknowledged: every status is a stored message; the ones
/// besides `Ok` say which acknowledgement condition it did not get, and why (RocketMQ's
/// PutMessageStatus, reference §5.3 and §6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutStatus {
    /// Durable as the flush mode and the role require.
    Ok,
    /// Written, but its flush did not finish within `syncFlushTimeout`; it will be visible
    /// once it does (RocketMQ's FLUSH_DISK_TIMEOUT).
    FlushDiskTimeout,
    /// SYNC_MASTER: durable here, but no replica confirmed it within `slaveTimeout`; it
    /// will be visible once one does (RocketMQ's FLUSH_SLAVE_TIMEOUT).
    FlushSlaveTimeout,
    /// SYNC_MASTER: durable here, but no replica was attached to confirm it, or the one
    /// attached went away before it did; visible without it (RocketMQ's
    /// SLAVE_NOT_AVAILABLE, which 4.9's `isSlaveOK` answers).
    SlaveNotAvailable,
}

/// The CommitLog positions of a store, in bytes of the shard's offset space (D4).
/// `flushed <= written <= write`; `replicated <= written`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogPositions {
    /// Durable on this node's disk.
    pub flushed: u64,
    /// Written to the files (the page cache).
    pub written: u64,
    /// Where the next append goes (encoded, maybe with a write in flight).
    pub write: u64,
    /// Confirmed by a replica ([`Store::confirm_replicated`]); the shard's first offset
    /// until one does.
    pub replicated: u64,
}

/// Where a message was stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub phys_offset: u64,
    pub queue_offset: u64,
    pub size: u32,
    pub store_timestamp: i64,
}

impl Placement {
    /// Where the record ends in the CommitLog: what an acknowledgement condition (written,
    /// flushed, replicated) must reach for it.
    pub fn end(&self) -> u64 {
        self.phys_offset + u64::from(self.size)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutResult {
    pub status: PutStatus,
    /// `None` only for a FlushDiskTimeout that came before the message was even encoded.
    pub placement: Option<Placement>,
}

/// RocketMQ's GetMessageStatus.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetStatus {
    Found,
    NoMatchedMessage,
    NoMessageInQueue,
    OffsetTooSmall,
    OffsetOverflowOne,
    OffsetOverflowBadly,
}

/// A stored record as read back: its exact bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredMessage {
    pub phys_offset: u64,
    pub queue_offset: u64,
    pub bytes: bytes::Bytes,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetResult {
    pub status: GetStatus,
    pub next_begin_offset: u64,
    pub min_offset: u64,
    pub max_offset: u64,
    pub messages: Vec<StoredMessage>,
}

/// How the store found its directory when it opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenKind {
    /// Nothing there yet.
    Fresh,
    /// A clean stop: appends resumed at the checkpointed end without scanning.
    Clean,
    /// A crash (or a log without a checkpoint): the log was scanned from `from` and cut at `to`.
    Recovered { from: u64, to: u64 },
}

/// Counters for benchmarks and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub puts: u64,
    pub put_bytes: u64,
    pub batches: u64,
    pub log_syncs: u64,
    /// Time spent in those fdatasyncs, in µs (wall time from submission to completion).
    pub log_sync_micros: u64,
    pub put_errors: u64,
    /// Store or shard tasks that panicked (each poisons the store, `watch.rs`).
    pub task_panics: u64,
    /// IndexFile entries added, one per key of each indexed record.
    pub index_entries: u64,
    /// Stored records the index could not take (`append.rs`).
    pub index_errors: u64,
    /// Index lookups answered ([`Store::lookup_keys`]).
    pub index_queries: u64,
    /// Time spent in them (the index walk and the record checks), in µs.
    pub index_query_micros: u64,
    /// What retention did (`retention.rs`).
    pub retention: retention::RetentionStats,
}

pub(crate) struct PendingPut {
    pub input: RecordInput,
    pub encoded_len: u32,
    pub slot: Rc<put_slot::PutSlot>,
}

/// ConsumeQueues by topic, then queue id: looked up by `&str` without allocating.
pub(crate) type QueueMap = HashMap<String, HashMap<i32, Rc<ConsumeQueue>>>;

/// Runs a batch of answers (see [`Store::set_answer_scope`]).
pub type AnswerScope = Rc<dyn Fn(&mut dyn FnMut())>;

/// Hears the topic of records becoming visible (see [`Store::set_visible_hook`]).
pub type VisibleHook = Rc<dyn Fn(&str)>;

pub(crate) struct Shared {
    pub config: StoreConfig,
    pub disk: Rc<dyn Disk>,
    pub clock: Clock,
    pub log: CommitLog,
    pub queues: RefCell<QueueMap>,
    pub pending: RefCell<VecDeque<PendingPut>>,
    pub appender_wake: Notify,
    pub flusher_wake: Notify,
    /// Woken whenever messages become visible (long polling waits on it).
    pub arrivals: Notify,
    /// Told the topic of each record as it becomes visible ([`Store::set_visible_hook`]).
    pub visible_hook: RefCell<Option<VisibleHook>>,
    pub poison: RefCell<Option<String>>,
    pub closing: Cell<bool>,
    pub dispatched_pos: Cell<u64>,
    /// The replication watermark: the CommitLog position up to which a replica confirmed
    /// the bytes ([`Store::confirm_replicated`]). Only grows; never past `written_pos`.
    pub replicated_pos: Cell<u64>,
    /// Whether a replica is attached to wait for ([`Store::set_replica_attached`]). A
    /// SYNC_MASTER batch written without one does not wait for the replica's condition.
    pub replica_attached: Cell<bool>,
    /// Whether a replica is needed at all ([`Store::set_replica_gate`]); `None`: always,
    /// as the role says.
    pub replica_gate: RefCell<Option<ReplicaGate>>,
    /// The master's write lease ([`Store::set_write_lease`]); `None`: no lease needed.
    pub write_lease: RefCell<Option<WriteLease>>,
    /// How long batches wait for the replica's confirmation (`confirm_timing.rs`).
    pub confirm_times: confirm_timing::ConfirmTimes,
    pub checkpoint: RefCell<Option<CheckpointFile>>,
    pub stats: Cell<StoreStats>,
    pub tasks: RefCell<Vec<JoinHandle<()>>>,
    pub appender_idle: Notify,
    /// The flush watchdog's clock, in ticks of `sync_flush_timeout / TIMEOUT_TICKS`.
    pub watchdog_tick: Cell<u64>,
    /// Answer slots of the batch the appender is writing.
    pub in_flight: RefCell<Vec<Rc<put_slot::PutSlot>>>,
    /// Written batches waiting for the acknowledgement conditions to reach their end
    /// (`waiters.rs`); the appender registers and releases them (`append.rs`).
    pub waiters: RefCell<waiters::Waiters<append::Batch>>,
    pub appender_busy: Cell<bool>,
    /// The directory lock ([`crate::io::Disk::lock`]), dropped at a clean close.
    pub lock_file: RefCell<Option<crate::io::FileLock>>,
    pub opened: Cell<OpenKind>,
    /// Wraps each appender turn's answers ([`Store::set_answer_scope`]); by default it
    /// just runs them.
    pub answer_scope: RefCell<AnswerScope>,
    /// The task [`Store::inject_task_panic`] asked to panic at its next turn.
    pub injected_panic: Cell<Option<StoreTask>>,
    /// The appender's group-commit wait for the producers it answered (`gather.rs`).
    pub gather: gather::Gather,
    /// SYNC_FLUSH: the log position below which the active segment's bytes past the write
    /// position were already written as zeros by an earlier batch (`append.rs`).
    pub zeroed_until: Cell<u64>,
    /// The IndexFiles, unless `messageIndexEnable` is off (`index.rs`).
    pub index: Option<index::Index>,
    /// Why puts are refused for disk space, while the cleaner finds the disk at or above
    /// `diskSpaceWarningLevelRatio` (`retention.rs`).
    pub space_refusal: RefCell<Option<String>>,
    pub retention: Cell<retention::RetentionStats>,
    /// Held by a retention run (a second run meanwhile does nothing) and by a replica's
    /// truncation, which cuts the files retention trims.
    pub cleaning: tokio::sync::Mutex<()>,
    /// Who keeps records from retention ([`Store::add_retention_holds`]).
    pub retention_holds: RefCell<Vec<Rc<dyn retention_holds::RetentionHolds>>>,
    /// Held by the checkpointer's round and by a replica's truncation, which lowers the
    /// checkpoint and cuts the queues the checkpoint writes out (`replica_cut.rs`).
    pub checkpoint_lock: tokio::sync::Mutex<()>,
    /// Held by the ASYNC_FLUSH flusher's sync and by a replica's truncation, which moves
    /// the log's positions back.
    pub flush_lock: tokio::sync::Mutex<()>,
    /// Master (written by puts) or replica (written by its master's stream).
    pub role: Cell<replica::StoreRole>,
    /// A replica's stream state: the received end, the incomplete record (`replica.rs`).
    pub replica: replica::ReplicaState,
}

impl Shared {
    pub fn poison(&self, cause: String) {
        let mut poison = self.poison.borrow_mut();
        if poison.is_none() {
            tracing::error!("store {} poisoned: {cause}", self.config.dir.display());
            *poison = Some(cause);
        }
    }

    pub fn poisoned(&self) -> Option<StoreError> {
        self.poison
            .borrow()
            .as_ref()
            .map(|cause| StoreError::Poisoned(cause.clone()))
    }

    pub fn update_retention(&self, change: impl FnOnce(&mut retention::RetentionStats)) {
        let mut stats = self.retention.get();
        change(&mut stats);
        self.retention.set(stats);
    }

    /// The log's first offset: the start of its oldest segment (retention moves it).
    pub fn log_start(&self) -> u64 {
        self.log
            .segments
            .borrow()
            .first_start()
            .unwrap_or(self.config.offset_base())
    }

    pub fn update_stats(&self, change: impl FnOnce(&mut StoreStats)) {
        let mut stats = self.stats.get();
        change(&mut stats);
        self.stats.set(stats);
    }

    pub fn queue(&self, topic: &str, queue_id: i32) -> Option<Rc<ConsumeQueue>> {
        self.queues.borrow().get(topic)?.get(&queue_id).cloned()
    }

    /// Every ConsumeQueue.
    pub fn all_queues(&self) -> Vec<Rc<ConsumeQueue>> {
        self.queues
            .borrow()
            .values()
            .flat_map(|queues| queues.values().cloned())
            .collect()
    }
}

/// A handle to an open store; clones share it. Not `Send`: it lives on its shard's thread.
#[derive(Clone)]
pub struct Store {
    shared: Rc<Shared>,
}

impl Store {
    /// Opens (creating, or recovering after a crash) the store in `config.dir`.
    /// Must run inside a tokio `LocalSet`.
    pub async fn open(
        config: StoreConfig,
        disk: Rc<dyn Disk>,
        clock: Clock,
    ) -> Result<Store, StoreError> {
        let shared = recovery::open(config, disk, clock).await?;
        let store = Store { shared };
        store.start_tasks();
        Ok(store)
    }

    /// Spawns the store's tasks, each under watch (`watch.rs`).
    fn start_tasks(&self) {
        let shared = &self.shared;
        let spawn =
            |task: StoreTask, future: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>| {
                let watched = watch::watched(shared, watch::Watchee::Store(task), future);
                tokio::task::spawn_local(async move {
                    watched.await;
                })
            };
        let mut tasks = shared.tasks.borrow_mut();
        tasks.push(spawn(
            StoreTask::Appender,
            Box::pin(append::run_appender(shared.clone())),
        ));
        if shared.config.flush_mode == FlushMode::Async {
            tasks.push(spawn(
                StoreTask::Flusher,
                Box::pin(flush::run_async_flusher(shared.clone())),
            ));
        }
        tasks.push(spawn(
            StoreTask::Checkpointer,
            Box::pin(flush::run_checkpointer(shared.clone())),
        ));
        tasks.push(spawn(
            StoreTask::Watchdog,
            Box::pin(flush::run_flush_watchdog(shared.clone())),
        ));
        tasks.push(spawn(
            StoreTask::Cleaner,
            Box::pin(retention::run_cleaner(shared.clone())),
        ));
    }

    /// Runs `future`, a task of this store's shard, under the store's watch: if it panics,
    /// the store is poisoned with the panic message (and the panic logged and counted), as
    /// for the store's own tasks. Resolves to `None` after a panic.
    pub fn watch<F: std::future::Future>(&self, task: &'static str, future: F) -> Watched<F> {
        watch::watched(&self.shared, watch::Watchee::Shard(task), future)
    }

    /// Test hook: `task` panics at its next turn (the appender: once it has taken a batch),
    /// to check the failure policy. Nothing a client sends can reach it.
    #[doc(hidden)]
    pub fn inject_task_panic(&self, task: StoreTask) {
        self.shared.injected_panic.set(Some(task));
    }

    pub fn config(&self) -> &StoreConfig {
        &self.shared.config
    }

    /// Stores one message and waits until it is as durable as the flush mode requires.
    pub async fn put(&self, input: RecordInput) -> Result<PutResult, StoreError> {
        let outcome = match self.enqueue(input) {
            Ok(slot) => put_slot::PutWait(slot).await,
            Err(error) => Err(error),
        };
        if outcome.is_err() {
            self.shared.update_stats(|stats| stats.put_errors += 1);
        }
        outcome
    }

    /// Stores `inputs` in order, as one group: every one is queued before any is awaited,
    /// so they share the appender's turns (one CommitLog write for a batch that fits
    /// `max_batch_bytes`) and get consecutive offsets in their queues. Queuing stops at the
    /// first refusal: the outcomes are those of the messages before it, each once it is as
    /// durable as the flush mode requires, then the refusal; later messages are not stored.
    pub async fn put_all(
        &self,
        inputs: impl IntoIterator<Item = RecordInput>,
    ) -> Vec<Result<PutResult, StoreError>> {
        let mut slots = Vec::new();
        let mut refusal = None;
        for input in inputs {
            match self.enqueue(input) {
                Ok(slot) => slots.push(slot),
                Err(error) => {
                    refusal = Some(error);
                    break;
                }
            }
        }
        let mut outcomes = Vec::with_capacity(slots.len() + 1);
        for slot in slots {
            outcomes.push(put_slot::PutWait(slot).await);
        }
        outcomes.extend(refusal.map(Err));
        let errors = to_u64(outcomes.iter().filter(|outcome| outcome.is_err()).count());
        if errors > 0 {
            self.shared.update_stats(|stats| stats.put_errors += errors);
        }
        outcomes
    }

    /// Stores one message like [`Store::put`], but hands the outcome to `done` instead of
    /// being awaited: at once when the put is refused, else from the appender (or the flush
    /// watchdog) on this shard, once the message is as durable as the flush mode requires.
    /// Nothing waits meanwhile, so a caller needs no task of its own per message.
    pub fn put_with(
        &self,
        input: RecordInput,
        done: impl FnOnce(Result<PutResult, StoreError>) + 'static,
    ) {
        let shared = self.shared.clone();
        let counted = move |outcome: Result<PutResult, StoreError>| {
            if outcome.is_err() {
                shared.update_stats(|stats| stats.put_errors += 1);
            }
            done(outcome);
        };
        match self.enqueue(input) {
            // The appender cannot run before this returns, so the callback is in place
            // before anything can answer the slot.
            Ok(slot) => slot.set_done(Box::new(counted)),
            Err(error) => counted(Err(error)),
        }
    }

    fn enqueue(&self, input: RecordInput) -> Result<Rc<put_slot::PutSlot>, StoreError> {
        let shared = &self.shared;
        if let Some(error) = shared.poisoned() {
            return Err(error);
        }
        if shared.closing.get() {
            return Err(StoreError::ShuttingDown);
        }
        if shared.role.get() == replica::StoreRole::Replica {
            return Err(StoreError::Replica);
        }
        if !append::lease_holds(shared) {
            return Err(StoreError::LeaseLapsed);
        }
        if let Some(why) = shared.space_refusal.borrow().as_ref() {
            shared.update_retention(|stats| stats.puts_refused_for_space += 1);
            return Err(StoreError::DiskFull(why.clone()));
        }
        topic::validate_topic(&input.topic)
            .map_err(|error| StoreError::MessageIllegal(error.to_string()))?;
        if input.queue_id < 0 {
            return Err(StoreError::MessageIllegal(format!(
                "queue id {} is negative",
                input.queue_id
            )));
        }
        if input.body.len() > shared.config.max_message_size {
            return Err(StoreError::MessageIllegal(format!(
                "body is {} bytes; maxMessageSize is {}",
                input.body.len(),
                shared.config.max_message_size
            )));
        }
        let encoded_len = record::encoded_len(&input)
            .map_err(|error| StoreError::MessageIllegal(error.to_string()))?;
        if to_u64(encoded_len) + to_u64(record::BLANK_RECORD_LEN) > shared.log.segment_size() {
            return Err(StoreError::MessageIllegal(format!(
                "record of {encoded_len} bytes does not fit a CommitLog segment of {}",
                shared.log.segment_size()
            )));
        }
        let waiting = shared.pending.borrow().len();
        if waiting >= shared.config.max_pending_puts {
            return Err(StoreError::Busy(waiting));
        }
        let slot = put_slot::PutSlot::new(shared.watchdog_tick.get());
        shared.pending.borrow_mut().push_back(PendingPut {
            input,
            encoded_len: to_u32(encoded_len),
            slot: slot.clone(),
        });
        shared.appender_wake.notify_one();
        Ok(slot)
    }

    /// The smallest queue offset still stored (0 for an unknown queue).
    pub fn min_offset(&self, topic: &str, queue_id: i32) -> u64 {
        self.shared
            .queue(topic, queue_id)
            .map(|queue| queue.min_offset())
            .unwrap_or(0)
    }

    /// One past the newest visible message's queue offset (0 for an unknown queue).
    pub fn max_offset(&self, topic: &str, queue_id: i32) -> u64 {
        self.shared
            .queue(topic, queue_id)
            .map(|queue| queue.max_offset())
            .unwrap_or(0)
    }

    /// The first queue offset whose message was stored at or after `timestamp_ms`;
    /// `max_offset` when every message is older.
    pub fn offset_by_timestamp(
        &self,
        topic: &str,
        queue_id: i32,
        timestamp_ms: i64,
    ) -> Result<u64, StoreError> {
        let Some(queue) = self.shared.queue(topic, queue_id) else {
            return Ok(0);
        };
        let (mut low, mut high) = (queue.min_offset(), queue.max_offset());
        while low < high {
            let middle = low + (high - low) / 2;
            if self.store_timestamp_at(&queue, middle)? < timestamp_ms {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        Ok(low)
    }

    /// Store time of the oldest message of a queue, if it has one.
    pub fn earliest_store_time(
        &self,
        topic: &str,
        queue_id: i32,
    ) -> Result<Option<i64>, StoreError> {
        let Some(queue) = self.shared.queue(topic, queue_id) else {
            return Ok(None);
        };
        if queue.max_offset() == queue.min_offset() {
            return Ok(None);
        }
        self.store_timestamp_at(&queue, queue.min_offset())
            .map(Some)
    }

    /// `len` CommitLog bytes at `phys` (a record [`Store::record_at`] found).
    pub fn read_log(&self, phys: u64, len: usize) -> Result<bytes::Bytes, StoreError> {
        self.shared
            .log
            .read(phys, len)
            .map_err(|error| StoreError::from_io("reading the CommitLog", &error))
    }

    /// Store time of the message at `queue_offset`, if the queue still holds it.
    pub fn message_store_time(
        &self,
        topic: &str,
        queue_id: i32,
        queue_offset: u64,
    ) -> Result<Option<i64>, StoreError> {
        let Some(queue) = self.shared.queue(topic, queue_id) else {
            return Ok(None);
        };
        if queue_offset < queue.min_offset() || queue_offset >= queue.max_offset() {
            return Ok(None);
        }
        self.store_timestamp_at(&queue, queue_offset).map(Some)
    }

    /// The ConsumeQueue entry at `queue_offset` of a queue, if it is visible and still
    /// stored.
    pub fn queue_entry(
        &self,
        topic: &str,
        queue_id: i32,
        queue_offset: u64,
    ) -> Result<Option<CqEntry>, StoreError> {
        let Some(queue) = self.shared.queue(topic, queue_id) else {
            return Ok(None);
        };
        Ok(queue
            .read_entries(queue_offset, 1)
            .map_err(|error| StoreError::from_io("reading a consume queue", &error))?
            .first()
            .copied())
    }

    /// Whether a queue still starts at offset 0 with a record recent enough to count as in
    /// memory: within `in_memory_window_bytes` of the CommitLog's end. RocketMQ asks the
    /// page cache (`mincore`) for the same answer; a distance is deterministic and close to
    /// it while the window fits the cache. False for an empty or unknown queue.
    pub fn starts_in_memory(&self, topic: &str, queue_id: i32) -> Result<bool, StoreError> {
        if self.min_offset(topic, queue_id) != 0 {
            return Ok(false);
        }
        let Some(first) = self.queue_entry(topic, queue_id, 0)? else {
            return Ok(false);
        };
        let end = self.shared.log.write_pos();
        let behind = end.saturating_sub(first.position().get());
        Ok(behind <= self.shared.config.in_memory_window_bytes)
    }

    /// Whether the record at `phys_offset` lies further behind the CommitLog's end than
    /// `in_memory_window_bytes`: RocketMQ's "the consumer reads from disk" estimate behind
    /// `suggestWhichBrokerId` (`accessMessageInMemoryMaxRatio`), by distance, as
    /// [`Store::starts_in_memory`].
    pub fn beyond_memory_window(&self, phys_offset: u64) -> bool {
        let end = self.shared.log.write_pos();
        end.saturating_sub(phys_offset) > self.shared.config.in_memory_window_bytes
    }

    /// Up to `max` visible ConsumeQueue entries of a queue from `queue_offset` on (none
    /// for an unknown queue).
    pub fn queue_entries(
        &self,
        topic: &str,
        queue_id: i32,
        queue_offset: u64,
        max: usize,
    ) -> Result<Vec<CqEntry>, StoreError> {
        let Some(queue) = self.shared.queue(topic, queue_id) else {
            return Ok(Vec::new());
        };
        queue
            .read_entries(queue_offset, max)
            .map_err(|error| StoreError::from_io("reading a consume queue", &error))
    }

    /// The `size` bytes of the record at `phys` (a ConsumeQueue entry's position).
    pub fn read_record(&self, phys: u64, size: usize) -> Result<bytes::Bytes, StoreError> {
        self.shared
            .log
            .read(phys, size)
            .map_err(|error| StoreError::from_io("reading the CommitLog", &error))
    }

    fn store_timestamp_at(
        &self,
        queue: &ConsumeQueue,
        queue_offset: u64,
    ) -> Result<i64, StoreError> {
        let entry: CqEntry = *queue
            .read_entries(queue_offset, 1)
            .map_err(|error| StoreError::from_io("reading a consume queue", &error))?
            .first()
            .ok_or_else(|| {
                StoreError::Corrupt(format!("queue offset {queue_offset} has no entry"))
            })?;
        let bytes = self
            .shared
            .log
            .read(entry.position().get(), entry.byte_len())
            .map_err(|error| StoreError::from_io("reading the CommitLog", &error))?;
        match record::decode(&bytes, Verify::Structure) {
            Ok(Decoded::Record(view)) => Ok(view.store_timestamp),
            other => Err(StoreError::Corrupt(format!(
                "consume queue entry {queue_offset} points at phys {} which holds no record: {other:?}",
                entry.phys_offset
            ))),
        }
    }

    /// Every (topic, queue id) with a ConsumeQueue.
    pub fn queues(&self) -> Vec<(String, i32)> {
        let mut keys: Vec<_> = self
            .shared
            .all_queues()
            .iter()
            .map(|queue| (queue.topic.clone(), queue.queue_id))
            .collect();
        keys.sort();
        keys
    }

    /// Per topic with a ConsumeQueue: the messages and record bytes this process stored
    /// in its queues (the metrics sampler reads it every few seconds; one pass over the
    /// queue map, no copy of the queues).
    pub fn topic_puts(&self) -> Vec<(String, u64, u64)> {
        self.shared
            .queues
            .borrow()
            .iter()
            .map(|(topic, queues)| {
                let (messages, bytes) = queues.values().fold((0, 0), |(m, b), queue| {
                    let (messages, bytes) = queue.appended();
                    (m + messages, b + bytes)
                });
                (topic.clone(), messages, bytes)
            })
            .collect()
    }

    /// Bytes of CommitLog segment files held (each file is preallocated whole).
    pub fn log_file_bytes(&self) -> u64 {
        let log = &self.shared.log;
        to_u64(log.segments.borrow().starts().len()) * log.segment_size()
    }

    /// Resolves when messages become visible after this call (long polling hook).
    pub fn arrivals(&self) -> tokio::sync::futures::Notified<'_> {
        self.shared.arrivals.notified()
    }

    /// Resolves when the CommitLog's written position grows after this call (what a
    /// master's HA streams wait on: written bytes go to slaves before they are visible).
    pub fn log_written(&self) -> tokio::sync::futures::Notified<'_> {
        self.shared.log.written_grew()
    }

    /// The CommitLog's positions: flushed, written, next append, and replicated.
    pub fn log_positions(&self) -> LogPositions {
        let log = &self.shared.log;
        LogPositions {
            flushed: log.flushed_pos(),
            written: log.written_pos(),
            write: log.write_pos(),
            replicated: self.shared.replicated_pos.get(),
        }
    }

    /// A replica has the CommitLog bytes up to `position` (the replication watermark,
    /// D14): puts waiting for a replica whose end it covers are released (visible, then
    /// answered), in offset order, now. The watermark only moves forward and never past
    /// what was written; either is a bug in the caller and panics with both values. A
    /// store that does not wait for replicas (ASYNC_MASTER) keeps the watermark all the
    /// same.
    pub fn confirm_replicated(&self, position: u64) {
        let shared = &self.shared;
        let (current, written) = (shared.replicated_pos.get(), shared.log.written_pos());
        assert!(
            position >= current,
            "the replication watermark may only move forward: {current} -> {position}"
        );
        assert!(
            position <= written,
            "a replica cannot confirm {position}: the CommitLog is written only up to {written}"
        );
        shared.replicated_pos.set(position);
        shared
            .confirm_times
            .confirmed(position, tokio::time::Instant::now());
        append::replica_reached(shared, position);
    }

    /// Whether a replica is attached to wait for (the replication service says, D14). A
    /// SYNC_MASTER put written while none is attached waits only for its flush and is
    /// answered SlaveNotAvailable; detaching answers every put still waiting for the
    /// replica the same way, releasing it on its flush alone. Nothing changes for a store
    /// that does not wait for replicas.
    pub fn set_replica_attached(&self, attached: bool) {
        let shared = &self.shared;
        if shared.replica_attached.replace(attached) && !attached {
            append::waive_replica(shared, PutStatus::SlaveNotAvailable);
        }
    }

    /// Makes whether a batch needs a replica's confirmation follow `gate` (controller
    /// mode, D18: a master whose SyncStateSet holds only itself acknowledges on its own
    /// conditions, with SEND_OK; one whose set holds a slave needs that slave). Read at
    /// every batch; a store without a gate needs a replica whenever its role says so.
    /// Batches held for a replica when the gate is lowered are released on their flush
    /// alone by the lease's recheck ([`Store::set_write_lease`], which controller mode
    /// sets with the gate).
    pub fn set_replica_gate(&self, gate: ReplicaGate) {
        self.shared.replica_gate.replace(Some(gate));
    }

    /// The gate [`Store::set_replica_gate`] set, if any.
    pub fn replica_gate(&self) -> Option<ReplicaGate> {
        self.shared.replica_gate.borrow().clone()
    }

    /// Makes puts and releases follow `lease` (controller mode, D18): a put is refused
    /// while it is lapsed, and batches are held (neither visible nor answered) until it
    /// holds again; a stop releases what is held as it releases any batch. A task looks
    /// every [`write_lease::RECHECK`] whether held batches may go, and whether the replica
    /// gate was lowered meanwhile ([`append::follow_replica_gate`]).
    pub fn set_write_lease(&self, lease: WriteLease) {
        self.shared.write_lease.replace(Some(lease));
        let shared = self.shared.clone();
        let recheck = async move {
            let mut ticks = tokio::time::interval(write_lease::RECHECK);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                if append::lease_holds(&shared) {
                    append::follow_replica_gate(&shared);
                    let answered = append::release(&shared);
                    if answered > 0 {
                        append::expect_back(&shared, answered);
                    }
                }
            }
        };
        let watched = watch::watched(
            &self.shared,
            watch::Watchee::Store(StoreTask::LeaseRecheck),
            recheck,
        );
        let task = tokio::task::spawn_local(async move {
            watched.await;
        });
        self.shared.tasks.borrow_mut().push(task);
    }

    /// How this store found its directory.
    pub fn opened(&self) -> OpenKind {
        self.shared.opened.get()
    }

    pub fn stats(&self) -> StoreStats {
        StoreStats {
            retention: self.shared.retention.get(),
            ..self.shared.stats.get()
        }
    }

    /// What retention has done so far.
    pub fn retention_stats(&self) -> retention::RetentionStats {
        self.shared.retention.get()
    }

    /// Registers a holder whose holds every retention run that is not forced keeps
    /// (`retention_holds.rs`). Register before the first await after [`Store::open`], so
    /// no run goes without it.
    pub fn add_retention_holds(&self, holds: Rc<dyn retention_holds::RetentionHolds>) {
        self.shared.retention_holds.borrow_mut().push(holds);
    }

    /// Runs the retention cleaner once now, as its timer would.
    pub async fn clean_now(&self) -> Result<retention::CleanupReport, StoreError> {
        retention::clean(&self.shared).await
    }

    /// The safe offset of the last checkpoint: recovery would start there.
    pub fn checkpointed_safe_offset(&self) -> u64 {
        self.shared
            .checkpoint
            .borrow()
            .as_ref()
            .and_then(|file| file.last())
            .map_or(0, |last| last.safe_offset)
    }

    /// The log's first offset (see [`Shared::log_start`]).
    pub fn log_start(&self) -> u64 {
        self.shared.log_start()
    }

    /// Has every appender turn's answers run inside `scope`, which must call the closure
    /// it is given exactly once. The node uses it to send a turn's responses to each
    /// connection in one write without waking its writer task
    /// ([`crate::server::reply_batch`]).
    pub fn set_answer_scope(&self, scope: AnswerScope) {
        *self.shared.answer_scope.borrow_mut() = scope;
    }

    /// Sets what hears, for each record that becomes visible, its topic (a run of records
    /// of one topic once), right after its ConsumeQueue entry is made: how the broker
    /// wakes another shard's parked pops of the topic ([`crate::broker::pop::wake`]), which
    /// [`Store::arrivals`] does not reach. The hook runs on the appender's turn, so it
    /// must be cheap and never wait.
    pub fn set_visible_hook(&self, hook: VisibleHook) {
        *self.shared.visible_hook.borrow_mut() = Some(hook);
    }

    /// Tells `hook` how long each batch that waited for a replica (SYNC_MASTER with a
    /// replica attached) took from its write to the confirmation covering it
    /// (`confirm_timing.rs`); unset, nothing is timed.
    pub fn set_confirm_hook(&self, hook: confirm_timing::ConfirmHook) {
        self.shared.confirm_times.set_hook(hook);
    }

    pub fn io_stats(&self) -> IoStats {
        self.shared.disk.stats()
    }

    pub fn backend_name(&self) -> &'static str {
        self.shared.disk.backend_name()
    }

    /// Why the store refuses writes, if it does.
    pub fn poison_cause(&self) -> Option<String> {
        self.shared.poison.borrow().clone()
    }

    /// Refuses new puts, lets every queued one finish, flushes everything, writes a clean
    /// checkpoint and removes the abort marker. A poisoned store keeps its abort marker so
    /// the next start recovers by scanning.
    pub async fn shutdown(&self) -> Result<(), StoreError> {
        // A replica's incomplete record must not outlive the run (`replica.rs`).
        replica::drop_incomplete(&self.shared).await?;
        flush::shutdown(&self.shared).await
    }

    /// Ends the store as a `kill -9` would (`abandon.rs`): its tasks aborted, its files
    /// closed and its directory lock released, with nothing flushed or marked clean, so the
    /// next open recovers. A no-op after a clean [`Store::shutdown`].
    pub fn abandon(&self) {
        abandon::abandon(&self.shared);
    }

    /// A guard that abandons this store when dropped ([`Store::abandon`]), for whoever runs
    /// it: an aborted or failed runner leaves nothing of the store running.
    pub fn abandon_on_drop(&self) -> AbandonOnDrop {
        AbandonOnDrop {
            store: self.clone(),
        }
    }
}
