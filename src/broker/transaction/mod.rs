//! Transactional messages (reference-2 §3): half messages, END_TRANSACTION (37) and the
//! check-back (CHECK_TRANSACTION_STATE, 39).
//!
//! ```text
//!   prepared send (TRAN_MSG=true, PGROUP=g) to T/q   routed to the owner of T/q
//!     └─▶ stored as RMQ_SYS_TRANS_HALF_TOPIC, the shard's own half queue,
//!         REAL_TOPIC=T REAL_QID=q                     (invisible to T's consumers)
//!   END_TRANSACTION (commit | rollback)               routed by the half's CommitLog offset (D4)
//!     └─▶ half found and checked ─▶ resolved once in the shard's window ─▶
//!         commit: T/q's message and the op record "d" in one batch; rollback: the op only
//!   check service (master only), every transactionCheckInterval:
//!     walks the undecided halves from the cursor; one older than transactionTimeOut gets
//!     CHECK_TRANSACTION_STATE on a live connection of g (counted by an op record "c");
//!     one checked transactionCheckMax times is moved to TRANS_CHECK_MAX_TIME_TOPIC
//! ```
//!
//! Where ringmq differs from RocketMQ, and why:
//! - One half queue and one op queue per shard (reference-2 §3.4 item 1): a half lives on
//!   the shard that owns its real queue, so a commit is written by that shard's appender
//!   with no hop, in the same batch as its op record.
//! - A check does not append a copy of the half (RocketMQ's `putBackHalfMsgQueue`): the
//!   check counts live in the window and in op records tagged `c`, so the half queue does
//!   not grow with every check, and every decision, whether answered to the producer's own
//!   END_TRANSACTION or to a check, names the one half. That is what makes a second
//!   decision a no-op whatever it says: a delayed oneway COMMIT after a check-driven
//!   ROLLBACK cannot flip the outcome.
//!
//! Invariants:
//! - A half is resolved at most once ([`window::Window::resolve`]): the first decision wins;
//!   later ones are answered SUCCESS and change nothing.
//! - A resolution is taken back only when its records could not be stored, so the half is
//!   checked again; nothing acknowledged to the store is decided twice.
//! - The cursor (`CID_RMQ_SYS_TRANS`'s committed offset on the half queue) never passes an
//!   undecided half, so a restart replays every op record that can name one (op records are
//!   written after their halves: they are found from the half's CommitLog offset on).
//!
//! Not here: a real message written before a crash whose op record was lost is written
//! again when the half is decided again (at-least-once, counted as `recommits`: a commit of
//! a half stored before this start, which may be such a second write).

pub mod check;
pub mod halves;
pub mod holds;
pub mod pending;
pub mod service;
pub mod window;

use std::cell::{Cell, RefCell};
use std::time::Duration;

use bytes::Bytes;

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;
use crate::store::properties;
use crate::store::record::{self, body_crc, Decoded, RecordInput, RecordView, Verify};
use crate::store::replica::StoreRole;
use crate::store::{PutResult, StoreError};

use crate::broker::{bad_header, delay, timer, Broker};

use self::halves::{HALF_TOPIC, OP_TOPIC};
use self::window::{Resolution, Window};

/// The transaction keys of one shard.
#[derive(Clone, Debug)]
pub struct TransactionSettings {
    /// `rejectTransactionMessage`.
    pub reject: bool,
    /// `transactionTimeOut`.
    pub timeout: Duration,
    /// `transactionCheckInterval`.
    pub check_interval: Duration,
    /// `transactionCheckMax`.
    pub check_max: u32,
}

impl Default for TransactionSettings {
    fn default() -> TransactionSettings {
        TransactionSettings {
            reject: false,
            timeout: Duration::from_millis(6000),
            check_interval: Duration::from_millis(30_000),
            check_max: 15,
        }
    }
}

/// `commitOrRollback` of END_TRANSACTION.
pub const COMMIT: i32 = 8;
pub const ROLLBACK: i32 = 12;
pub const UNKNOWN: i32 = 0;

pub use crate::metrics::sections::transactions::TransactionFigures;

/// One shard's transaction state: its queues and the window of undecided halves.
pub struct Transactions {
    pub half_queue: i32,
    pub op_queue: i32,
    window: RefCell<Window>,
    /// The half queue's end when this state was opened: halves below it may have had a
    /// commit written before a restart.
    opened_end: u64,
    figures: Cell<TransactionFigures>,
    /// Where the figures are shown (the shard's metrics).
    metrics: std::sync::Arc<crate::metrics::ShardMetrics>,
}

impl Transactions {
    /// The state of `broker`'s shard: the window from the check cursor, with every op
    /// record that can name a half in it replayed. A slave keeps no window (it decides
    /// nothing); a slave started as a master replays from the cursor it copied.
    pub fn open(broker: &Broker, half_queue: i32, op_queue: i32) -> Result<Transactions, String> {
        let store = broker.store();
        let (min, max) = (
            store.min_offset(HALF_TOPIC, half_queue),
            store.max_offset(HALF_TOPIC, half_queue),
        );
        let cursor = broker
            .consumer_offsets
            .query(halves::CHECK_GROUP, HALF_TOPIC, half_queue)
            .map_or(min, |offset| (offset.max(0) as u64).clamp(min, max));
        let mut window = if store.role() == StoreRole::Replica {
            Window::new(max, max)
        } else {
            Window::new(cursor, max)
        };
        if window.pending() > 0 {
            check::replay_ops(broker, &mut window, half_queue, op_queue)?;
        }
        window.advance();
        Ok(Transactions {
            half_queue,
            op_queue,
            window: RefCell::new(window),
            opened_end: max,
            figures: Cell::new(TransactionFigures::default()),
            metrics: broker.metrics().clone(),
        })
    }

    pub fn figures(&self) -> TransactionFigures {
        self.figures.get()
    }

    fn count(&self, change: impl FnOnce(&mut TransactionFigures)) {
        let mut figures = self.figures.get();
        change(&mut figures);
        figures.pending = self.window.borrow().pending();
        self.figures.set(figures);
        self.metrics.set_transactions(figures);
    }

    /// Undecided halves on this shard (as of the last look at the half queue).
    pub fn pending(&self) -> u64 {
        self.window.borrow().pending()
    }

    /// Bytes the window of undecided halves holds.
    pub fn window_bytes(&self) -> usize {
        self.window.borrow().slot_bytes()
    }

    /// The lowest half queue offset still undecided.
    pub fn cursor(&self) -> u64 {
        self.window.borrow().base()
    }

    pub(crate) fn window(&self) -> std::cell::RefMut<'_, Window> {
        self.window.borrow_mut()
    }

    /// Takes in the halves stored since the last look.
    fn catch_up(&self, broker: &Broker) {
        let end = broker.store().max_offset(HALF_TOPIC, self.half_queue);
        self.window.borrow_mut().extend_to(end);
    }
}

/// Rewrites a checked prepared send into its half message, or says why it is refused:
/// NO_PERMISSION under `rejectTransactionMessage` (RocketMQ's status and words),
/// MESSAGE_ILLEGAL without a producer group.
pub fn prepare(
    broker: &Broker,
    record: &mut RecordInput,
    uniq_key: &str,
) -> Result<(), (i32, String)> {
    if broker.config.transactions.reject {
        return Err((
            response::NO_PERMISSION,
            format!(
                "the broker[{}] sending transaction message is forbidden",
                broker.identity.broker_name
            ),
        ));
    }
    if properties::get(&record.properties, halves::PGROUP).is_none_or(str::is_empty) {
        return Err((
            response::MESSAGE_ILLEGAL,
            "a transactional message needs property PGROUP (its producer group): the broker checks its state back with that group".into(),
        ));
    }
    let transactions = broker.transactions.get().ok_or_else(|| {
        (
            response::SYSTEM_ERROR,
            "transactions are not open on this shard".to_string(),
        )
    })?;
    for topic in [HALF_TOPIC, OP_TOPIC] {
        crate::broker::requests::send::ensure_system_topic(
            broker,
            topic,
            broker.shard.count() as u32,
        )
        .map_err(|why| (response::SYSTEM_ERROR, why.to_string()))?;
    }
    halves::into_half(record, transactions.half_queue, uniq_key);
    transactions.count(|figures| figures.prepared += 1);
    Ok(())
}

/// END_TRANSACTION's header.
struct EndHeader {
    producer_group: String,
    half_offset: i64,
    commit_log_offset: i64,
    decision: i32,
    from_check: bool,
}

impl EndHeader {
    fn parse(request: &RemotingCommand) -> Result<EndHeader, crate::remoting::FieldError> {
        Ok(EndHeader {
            producer_group: request.get_str("producerGroup")?.to_owned(),
            half_offset: request.get_i64("tranStateTableOffset")?,
            commit_log_offset: request.get_i64("commitLogOffset")?,
            decision: request.get_i32("commitOrRollback")?,
            from_check: request.opt_bool("fromTransactionCheck")?.unwrap_or(false),
        })
    }
}

fn answer(request: &RemotingCommand, code: i32, remark: impl Into<String>) -> RemotingCommand {
    RemotingCommand::response_to(request, code, Some(remark.into()))
}

/// END_TRANSACTION (37): commits or rolls back one half, once.
pub async fn end_transaction(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    if broker.store().role() == StoreRole::Replica {
        return answer(
            request,
            response::SLAVE_NOT_AVAILABLE,
            "this broker is a slave: END_TRANSACTION is served by its master only",
        );
    }
    let header = match EndHeader::parse(request) {
        Ok(header) => header,
        Err(error) => return bad_header(request, error),
    };
    let Some(transactions) = broker.transactions.get() else {
        return answer(
            request,
            response::SYSTEM_ERROR,
            "transactions are not open on this shard",
        );
    };
    match header.decision {
        COMMIT | ROLLBACK => {}
        UNKNOWN => {
            tracing::debug!(
                group = %crate::remoting::log_safe::log_safe(&header.producer_group),
                half = header.half_offset,
                from_check = header.from_check,
                "a producer does not know its transaction's state yet: the half waits for its check"
            );
            return answer(request, response::SUCCESS, "the half waits for its check");
        }
        other => {
            return answer(
                request,
                response::SYSTEM_ERROR,
                format!("commitOrRollback {other} is not 8 (commit), 12 (rollback) or 0 (unknown)"),
            )
        }
    }
    let bytes = match find_half(broker, transactions, &header) {
        Ok(bytes) => bytes,
        Err(remark) => return answer(request, response::SYSTEM_ERROR, remark),
    };
    let Ok(Decoded::Record(half)) = record::decode(&bytes, Verify::Structure) else {
        return answer(
            request,
            response::SYSTEM_ERROR,
            format!(
                "Find prepared transaction message failed: no record at commit log offset {}",
                header.commit_log_offset
            ),
        );
    };
    if let Err(why) = halves::check_half(&half, &header.producer_group, header.half_offset) {
        return answer(request, response::SYSTEM_ERROR, why.to_string());
    }
    if let Some(refusal) = immunity_refusal(broker, &half, &header) {
        return answer(request, response::ILLEGAL_OPERATION, refusal);
    }
    let decided = decide(broker, transactions, &half, header.decision == COMMIT).await;
    match decided {
        Ok(Resolution::Resolved) => answer(request, response::SUCCESS, ""),
        Ok(_) => answer(
            request,
            response::SUCCESS,
            "this half message was decided before; nothing changed",
        ),
        Err((code, remark)) => answer(request, code, remark),
    }
}

/// The stored half a decision names: the half queue's entry at `tranStateTableOffset` must
/// point at `commitLogOffset`.
fn find_half(
    broker: &Broker,
    transactions: &Transactions,
    header: &EndHeader,
) -> Result<Bytes, String> {
    let failed = |why: String| format!("Find prepared transaction message failed: {why}");
    if header.half_offset < 0 || header.commit_log_offset < 0 {
        return Err(failed(format!(
            "offsets must not be negative (tranStateTableOffset {}, commitLogOffset {})",
            header.half_offset, header.commit_log_offset
        )));
    }
    let entry = broker
        .store()
        .queue_entry(
            HALF_TOPIC,
            transactions.half_queue,
            header.half_offset as u64,
        )
        .map_err(|error| failed(error.to_string()))?
        .ok_or_else(|| {
            failed(format!(
                "no half message at queue offset {}",
                header.half_offset
            ))
        })?;
    if entry.phys_offset != header.commit_log_offset {
        return Err(failed(format!(
            "the half message at queue offset {} is at commit log offset {}, not {}",
            header.half_offset, entry.phys_offset, header.commit_log_offset
        )));
    }
    broker
        .store()
        .read_record(entry.phys_offset as u64, entry.size as usize)
        .map_err(|error| failed(error.to_string()))
}

/// A producer's own decision after the half's check immunity ran out is refused
/// (`EndTransactionProcessor`): the check owns the half from then on.
fn immunity_refusal(broker: &Broker, half: &RecordView<'_>, header: &EndHeader) -> Option<String> {
    if header.from_check || properties::get(half.properties, halves::CHECK_IMMUNITY).is_none() {
        return None;
    }
    let timeout = broker.config.transactions.timeout.as_millis() as i64;
    let immunity = halves::immunity_ms(half.properties, timeout);
    let age = broker.now_ms() - half.born_timestamp;
    (age > immunity).then(|| {
        format!(
            "the half message's check immunity ({immunity} ms) ran out {} ms ago: its state is decided by the check",
            age - immunity
        )
    })
}

/// Resolves the half `view` once: a commit writes its real message (and the op record),
/// a rollback the op record only. The resolution is taken back when they cannot be stored.
pub(crate) async fn decide(
    broker: &Broker,
    transactions: &Transactions,
    half: &RecordView<'_>,
    commit: bool,
) -> Result<Resolution, (i32, String)> {
    transactions.catch_up(broker);
    let offset = half.queue_offset as u64;
    let resolution = transactions.window().resolve(offset);
    if resolution != Resolution::Resolved {
        transactions.count(|figures| figures.repeated_decisions += 1);
        return Ok(resolution);
    }
    let stored = if commit {
        write_commit(broker, transactions, half).await
    } else {
        put_ops(broker, transactions, halves::DECIDED_TAG, &[offset]).await
    };
    if let Err(error) = stored {
        transactions.window().unresolve(offset);
        return Err(error);
    }
    transactions.window().settle(offset);
    let latency = (broker.now_ms() - half.store_timestamp).max(0) as u64;
    let recommit = commit && offset < transactions.opened_end;
    transactions.count(|figures| {
        if commit {
            figures.commits += 1;
        } else {
            figures.rollbacks += 1;
        }
        figures.recommits += u64::from(recommit);
        figures.decision_ms_sum += latency;
        figures.decision_ms_max = figures.decision_ms_max.max(latency);
    });
    Ok(resolution)
}

/// Stores a commit: the real message (delayed if it asks for a delay level or a timer, as
/// any message) and the op record. Local and undelayed, both go in one batch.
async fn write_commit(
    broker: &Broker,
    transactions: &Transactions,
    half: &RecordView<'_>,
) -> Result<(), (i32, String)> {
    let mut real =
        halves::committed(half).map_err(|why| (response::SYSTEM_ERROR, why.to_string()))?;
    let schedule = schedule_committed(broker, &mut real);
    let owner = match schedule {
        Scheduled::Level(level) => broker
            .shard
            .owner(crate::store::topic::SCHEDULE_TOPIC, level as i32 - 1),
        _ => broker.shard.owner(&real.topic, real.queue_id),
    };
    let offset = half.queue_offset as u64;
    if owner == broker.shard.id() {
        let op = op_record(
            broker,
            transactions,
            halves::DECIDED_TAG,
            Bytes::from(format!("{offset},")),
        );
        let outcomes = broker.store().put_all([real, op]).await;
        for outcome in outcomes {
            stored_or_error(outcome)?;
        }
        wake_scheduled(broker, schedule);
        return Ok(());
    }
    stored_or_error(broker.shard.put_on(owner, real).await)?;
    put_ops(broker, transactions, halves::DECIDED_TAG, &[offset]).await
}

/// Where a committed message waits before its topic sees it.
#[derive(Clone, Copy)]
enum Scheduled {
    Now,
    Level(u32),
    Timer,
}

/// Applies a delay level or a timer the committed message asks for (RocketMQ's commit goes
/// through `putMessage`, whose hook delays it); a value that cannot be honoured is logged
/// and the message delivered at once (it was accepted when prepared).
fn schedule_committed(broker: &Broker, real: &mut RecordInput) -> Scheduled {
    match delay::requested_level(&real.properties, real.sys_flag, &broker.config.delay_levels) {
        Ok(Some(level)) => {
            if let Err(why) = crate::broker::requests::send::ensure_schedule_topic(broker) {
                tracing::warn!("a committed message's delay level is not honoured: {why}");
                return Scheduled::Now;
            }
            delay::schedule(real, level);
            return Scheduled::Level(level);
        }
        Ok(None) => {}
        Err(why) => {
            tracing::warn!("a committed message's delay level is not honoured: {why}");
            return Scheduled::Now;
        }
    }
    let due = timer::requested_due(
        &real.properties,
        real.sys_flag,
        || broker.now_ms(),
        broker.config.timer_max_delay_sec,
    );
    match (due, broker.timers.get()) {
        (Ok(Some(due)), Some(timers)) if broker.config.timer_enabled => {
            if let Err(why) = crate::broker::requests::send::ensure_timer_topic(broker) {
                tracing::warn!("a committed message's timer is not honoured: {why}");
                return Scheduled::Now;
            }
            timer::schedule(real, due, timers.queue);
            Scheduled::Timer
        }
        (Ok(None), _) => Scheduled::Now,
        (outcome, _) => {
            tracing::warn!(
                ?outcome,
                "a committed message's timer is not honoured (timers off or a bad value)"
            );
            Scheduled::Now
        }
    }
}

fn wake_scheduled(broker: &Broker, schedule: Scheduled) {
    match schedule {
        Scheduled::Level(level) => broker.delay_wake(level).notify_one(),
        Scheduled::Timer => {
            if let Some(timers) = broker.timers.get() {
                timers.wake.notify_one();
            }
        }
        Scheduled::Now => {}
    }
}

fn stored_or_error(outcome: Result<PutResult, StoreError>) -> Result<(), (i32, String)> {
    // A flush or replica shortfall still stored the record (Java counts it as success).
    outcome.map(|_| ()).map_err(|error| {
        (
            response::SYSTEM_ERROR,
            format!("the transaction's records could not be stored: {error}"),
        )
    })
}

/// An op record of `tag` on the shard's op queue.
fn op_record(broker: &Broker, transactions: &Transactions, tag: &str, body: Bytes) -> RecordInput {
    let uniq_key = broker.uniq_keys.next(broker.now_ms());
    let properties = properties::encode([
        (properties::TAGS, tag),
        (properties::UNIQ_KEY, uniq_key.as_str()),
        (properties::WAIT, "false"),
    ]);
    RecordInput {
        topic: OP_TOPIC.to_owned(),
        queue_id: transactions.op_queue,
        flag: 0,
        sys_flag: 0,
        born_timestamp: broker.now_ms(),
        born_host: broker.identity.store_host,
        store_host: broker.identity.store_host,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body_crc: body_crc(&body),
        body,
        properties,
    }
}

/// Stores op records of `tag` listing `offsets`.
pub(crate) async fn put_ops(
    broker: &Broker,
    transactions: &Transactions,
    tag: &str,
    offsets: &[u64],
) -> Result<(), (i32, String)> {
    let records: Vec<RecordInput> = halves::op_bodies(offsets)
        .into_iter()
        .map(|body| op_record(broker, transactions, tag, body))
        .collect();
    for outcome in broker.store().put_all(records).await {
        stored_or_error(outcome)?;
    }
    Ok(())
}
