//! POP consumption (reference part 2 §2): POP_MESSAGE (200050) with long polling,
//! ACK_MESSAGE (200051), BATCH_ACK_MESSAGE (200151) and CHANGE_MESSAGE_INVISIBLETIME
//! (200053), over each shard's in-flight table ([`self::state`]) and revive log
//! ([`self::log`]).
//!
//! ```text
//!   POP(group, topic, queue q ≥ 0)  ── routed to q's owner ──▶ pop_queue:
//!     offsets visible again (deadline passed) ─▶ redelivered, reconsumeTimes + 1
//!       └─ past the group's retryMaxTimes ─▶ %DLQ%<group> (send-back path), ack logged
//!     then new offsets from the cursor (tag filter applied; skipped ones are consumed)
//!     ─▶ checkpoint record stored (durable as a send) ─▶ response
//!   nothing: park (pollTime, at most maxSuspend; parkedPulls bound shared with pulls)
//!     until an arrival, a deadline in flight, or the poll time ─▶ POLLING_TIMEOUT
//!   POP(queue -1): every queue of the topic in turn, the other shards' through their
//!     mailboxes without parking (each answers with its earliest deadline in flight);
//!     then parks here, woken by this shard's arrivals, by an arrival of the topic on
//!     any other shard ([`self::wake`]), or by the earliest deadline of them all
//!   a parked pop ends when its connection closes; at most maxParkedRequestsPerConnection
//!     are parked per connection (past it POLLING_FULL)
//!   ACK / BATCH_ACK: a delivery in flight with the handle's popTime ─▶ ack record stored
//!     ─▶ out of the table; the group's committed offset rises to the lowest in flight
//!   CHANGE_INVISIBLETIME: new checkpoint (popTime = now) stored ─▶ the old handle is void
//! ```
//!
//! Choices, each different from Java where said:
//! - Redelivery comes from the topic's own queue (Java re-puts to `%RETRY%<group>_<topic>`),
//!   so every message is handed out with mark 0 and its own queue offset; the copy's
//!   `reconsumeTimes` is set to the delivery's count in the response (the stored record
//!   is not changed; its CRC property then describes the stored bytes, which no client
//!   checks).
//! - A message popped more than the group's `retryMaxTimes` goes to `%DLQ%<group>` when it
//!   falls due again (Java's remoting path has no POP DLQ; the client drops it).
//! - The poll deadline is the request's arrival plus `pollTime`, not the client's
//!   `bornTime`: a client clock off by more than 0.5 s does not break POP (pitfall 5).
//! - An ack or change of a delivery not in flight (never popped, acknowledged already,
//!   or redelivered since with a new handle) is NO_MESSAGE naming why (Java answers
//!   SUCCESS); in a batch such entries are skipped and counted.
//! - A slave serves POP, ACK and CHANGE_INVISIBLETIME while its master's stream is down,
//!   from its copy of the table, which follows the replicated revive log ([`follow`]);
//!   Java serves them on a master only (and its stock clients send them to brokerId 0 only).
//! - Orderly POP (`order=true`) is refused: orderly consumers lock queues
//!   ([`crate::broker::requests::lock_requests`]) and pull.
//!
//! Invariants: every POP and CHANGE_INVISIBLETIME response carries the header fields the
//! clients decode (`popTime`, `invisibleTime`, `reviveQid`, `restNum` ≥ 0, and the info
//! strings), on error too; a pop is answered only after its checkpoint is stored, so what
//! a client holds survives a crash; the table is borrowed only between awaits.

pub mod follow;
pub mod holds;
pub mod log;
pub mod reset;
pub mod service;
pub mod state;
pub mod wake;
pub mod wire;

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use crate::io::meta::MetaFiles;
use crate::metrics::ShardMetrics;
use crate::remoting::codes::{request as request_code, response};
use crate::remoting::{ExtFields, FieldError, RemotingCommand};
use crate::store::record;

use self::log::{self as pop_log, PopLogError, ReplayMark, POP_LOG_TOPIC};
use self::state::{Delivery, LogRecord, PopTable, QueueKey};
use self::wire::{self as pop_wire, BatchAckBody, ReceiptHandle, MAX_POP_BATCH};
use crate::broker::tables::persisted_table::{PersistedTable, WriteFailed};
use crate::broker::{bad_header, naming::names, requests::pull, Broker};

/// Longest invisible time a pop or change may ask for (a day; Java's client caps at 12 h).
pub const MAX_INVISIBLE_TIME_MS: i64 = 24 * 3600 * 1000;
/// How often a changed replay mark is written.
pub const MARK_INTERVAL: Duration = Duration::from_secs(1);
/// How long a message whose DLQ copy could not be stored waits before it is tried again.
const DLQ_RETRY_MS: i64 = 1000;
/// The marker of a pop copy another shard sends while serving a pop of any queue: answer
/// without parking. Removed from client requests with the other internal markers.
pub const NO_PARK: &str = "_ringmqPopNoPark";
/// In the answer to a [`NO_PARK`] copy that found nothing: the earliest deadline in flight
/// on its queue (ms since the epoch), when the pop of any queue must look again. Only
/// the node's own copies carry [`NO_PARK`], so no client sees it.
const NEXT_DUE: &str = "_ringmqPopNextDue";

/// One shard's POP state.
pub struct Pops {
    /// The queue of [`POP_LOG_TOPIC`] this shard owns.
    pub log_queue: i32,
    pub(super) table: RefCell<PopTable>,
    /// The mark last written: a retention hold, so it changes file first (readers never
    /// see a mark the file does not hold yet), and off the reactor.
    written_mark: PersistedTable<pop_log::Mark>,
    /// Rotates the first queue a pop of any queue tries.
    next_any: Cell<u32>,
    /// On a slave: where the table stands against the replicated log ([`follow`]).
    follow: follow::Follow,
}

impl Pops {
    /// Opens the shard's POP state: reads the replay mark and replays the log from it.
    /// Each replayed queue's watermark becomes the group's committed offset.
    pub fn open(
        broker: &Broker,
        files: Arc<dyn MetaFiles>,
        log_queue: i32,
    ) -> Result<Pops, PopLogError> {
        let mark = ReplayMark::new(files, &broker.store.config().dir);
        let stored = mark.read().map_err(PopLogError::MarkUnreadable)?;
        let offsets = broker.consumer_offsets.clone();
        let (table, applied) = pop_log::rebuild(&broker.store, log_queue, &stored, |key| {
            offsets
                .query(&key.group, &key.topic, key.queue_id)
                .map_or(0, |offset| offset.max(0) as u64)
        })?;
        for (key, watermark) in table.watermarks() {
            offsets.commit(&key.group, &key.topic, key.queue_id, watermark as i64);
        }
        if applied > 0 {
            tracing::info!(
                shard = broker.shard.id(),
                from = stored.replay_from,
                applied,
                inflight = table.inflight(),
                "POP state replayed"
            );
        }
        let store = &broker.store;
        Ok(Pops {
            log_queue,
            table: RefCell::new(table),
            written_mark: mark.table(stored),
            next_any: Cell::new(0),
            follow: follow::Follow::from(
                store.max_offset(POP_LOG_TOPIC, log_queue),
                store.replica_stats().truncations,
            ),
        })
    }

    /// The lowest log offset a replay after a crash would start at: the written mark
    /// (the retention hold of the log; every checkpoint in flight is at or above it).
    pub fn replay_from(&self) -> u64 {
        self.written_mark.read(|mark| mark.replay_from)
    }

    /// Writes the replay mark if it moved, on tokio's blocking pool; at shutdown and every
    /// [`MARK_INTERVAL`].
    pub async fn write_mark(&self, log_end: u64) -> Result<(), WriteFailed> {
        self.write_mark_over(log_end, false).await
    }

    /// Writes the replay mark from the table whatever was written before: after a slave's
    /// table was rebuilt from its log's start because the log was truncated, the written
    /// mark may count records that are gone, and "only forward" would keep it.
    pub async fn replace_mark(&self, log_end: u64) -> Result<(), WriteFailed> {
        self.write_mark_over(log_end, true).await
    }

    async fn write_mark_over(&self, log_end: u64, replace: bool) -> Result<(), WriteFailed> {
        assert!(
            !self.follow.is_local(),
            "a replay mark was about to be written from a slave's table holding its own \
             deliveries (log end {log_end})"
        );
        let written = match replace {
            false => self.written_mark.snapshot(),
            true => Arc::new(pop_log::Mark::default()),
        };
        let next = pop_log::next_mark(&self.table.borrow(), log_end, &written);
        if next == *written {
            return Ok(());
        }
        drop(written);
        self.written_mark
            .change_written(move |mark| {
                *mark = next;
                true
            })
            .await
            .map(|_| ())
    }
}

/// Writes the replay mark and the in-flight figures every [`MARK_INTERVAL`].
pub async fn run_housekeeping(broker: Rc<Broker>, pops: Rc<Pops>) {
    loop {
        tokio::time::sleep(MARK_INTERVAL).await;
        let end = broker.store.max_offset(POP_LOG_TOPIC, pops.log_queue);
        if let Err(failed) = pops.write_mark(end).await {
            tracing::error!("{failed}");
        }
        broker
            .metrics
            .set_pop_inflight(pops.table.borrow().inflight_by_group());
    }
}

/// The POP_MESSAGE header fields used here.
struct PopHeader {
    group: String,
    topic: String,
    queue_id: i32,
    max_msg_nums: i32,
    invisible_time: i64,
    poll_time: i64,
    init_mode: i32,
    exp_type: Option<String>,
    exp: Option<String>,
    order: bool,
}

fn decode_pop(request: &RemotingCommand) -> Result<PopHeader, FieldError> {
    Ok(PopHeader {
        group: request.get_str("consumerGroup")?.to_owned(),
        topic: request.get_str("topic")?.to_owned(),
        queue_id: request.get_i32("queueId")?,
        max_msg_nums: request.get_i32("maxMsgNums")?,
        invisible_time: request.get_i64("invisibleTime")?,
        poll_time: request.opt_i64("pollTime")?.unwrap_or(0),
        init_mode: request.opt_i32("initMode")?.unwrap_or(0),
        exp_type: request.opt_str("expType").map(str::to_owned),
        exp: request.opt_str("exp").map(str::to_owned),
        order: request.opt_bool("order")?.unwrap_or(false),
    })
}

/// A pop's answer before it becomes a response.
struct Served {
    pop_time: i64,
    offsets: Vec<u64>,
    body: Vec<u8>,
    /// The records as CommitLog file ranges instead of `body`, sent without a copy (a
    /// pop of new messages only, D8).
    file_body: Option<crate::io::file_body::FileBody>,
    rest: u64,
}

/// The response to a pop, with every header field the clients decode.
fn pop_response(
    request: &RemotingCommand,
    code: i32,
    remark: Option<String>,
    pop_time: i64,
    invisible_time: i64,
    queue_id: i32,
    served: Option<Served>,
) -> RemotingCommand {
    let mut answer = RemotingCommand::response_to(request, code, remark);
    let (offsets, rest, body, file_body) = match served {
        Some(served) => (served.offsets, served.rest, served.body, served.file_body),
        None => (Vec::new(), 0, Vec::new(), None),
    };
    let (start, list) = pop_wire::offset_info(queue_id, &offsets);
    answer.put_ext("popTime", pop_time);
    answer.put_ext("invisibleTime", invisible_time);
    answer.put_ext("reviveQid", 0);
    answer.put_ext("restNum", rest);
    answer.put_ext("startOffsetInfo", start);
    answer.put_ext("msgOffsetInfo", list);
    answer.put_ext("orderCountInfo", "");
    if !body.is_empty() {
        answer = answer.with_body(body);
    }
    if let Some(file_body) = file_body {
        answer.file_body = file_body;
    }
    answer
}

/// The shard's POP service, if it serves here: a master's always; a slave's only while its
/// master's stream is down, from its copy of the state ([`follow`]). The error is the
/// remark of the SYSTEM_ERROR answer.
pub(crate) fn serving(broker: &Broker) -> Result<&Rc<Pops>, String> {
    let pops = broker
        .pops
        .get()
        .ok_or_else(|| "POP is not running on this shard".to_owned())?;
    if !is_slave(broker) {
        return Ok(pops);
    }
    if broker.master_stream_up() {
        return Err(
            "this broker is a slave and its master's stream is up: POP, ACK and \
                    CHANGE_INVISIBLE_TIME are served by its master (a slave serves them only \
                    while its master is away)"
                .into(),
        );
    }
    follow::serve_locally(broker, pops)
        .map_err(|error| format!("this slave cannot take over the POP state: {error}"))?;
    Ok(pops)
}

fn is_slave(broker: &Broker) -> bool {
    broker.store().role() == crate::store::replica::StoreRole::Replica
}

/// Writes `record` to the shard's revive log; its log offset. A slave serving while its
/// master is away writes nothing (its log only copies the master's): the record's effect
/// lives in the table alone ([`follow`]), and `None` says so.
async fn log_record(
    broker: &Broker,
    pops: &Pops,
    record: &LogRecord,
    now_ms: i64,
) -> Result<Option<u64>, PopLogError> {
    if is_slave(broker) {
        return Ok(None);
    }
    pop_log::append(
        &broker.store,
        pops.log_queue,
        record,
        broker.identity.store_host,
        now_ms,
    )
    .await
    .map(Some)
}

/// POP_MESSAGE (200050).
pub async fn pop_message(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let now = broker.now_ms();
    let header = match decode_pop(request) {
        Ok(header) => header,
        Err(error) => {
            let mut answer = bad_header(request, error);
            for (key, value) in [("popTime", now), ("invisibleTime", 0), ("reviveQid", 0)] {
                answer.put_ext(key, value);
            }
            answer.put_ext("restNum", 0);
            return answer;
        }
    };
    let fail = |code, why: String| {
        pop_response(
            request,
            code,
            Some(why),
            now,
            header.invisible_time,
            header.queue_id,
            None,
        )
    };
    let pops = match serving(broker) {
        Ok(pops) => pops,
        Err(why) => return fail(response::SYSTEM_ERROR, why),
    };
    let (topic_config, max_attempts) = match check_pop(broker, &header) {
        Ok(checked) => checked,
        Err((code, why)) => return fail(code, why),
    };
    let filter = match filter_of(broker, &header) {
        Ok(filter) => filter,
        Err(why) => return fail(response::SUBSCRIPTION_PARSE_FAILED, why.to_string()),
    };
    let job = Job {
        header: &header,
        filter: filter.as_deref(),
        max_attempts,
    };
    match pop_until_served(broker, pops, request, &job, &topic_config).await {
        Ok((queue_id, served)) => served_response(broker, request, &header, queue_id, served),
        Err(Unserved::Forwarded(answer)) => answer,
        Err(Unserved::Refused(code, why)) => fail(code, why),
        Err(Unserved::TimedOut { next_due }) => {
            let mut answer = fail(response::POLLING_TIMEOUT, "no new message".into());
            if let (true, Some(due)) = (request.opt_str(NO_PARK).is_some(), next_due) {
                answer.put_ext(NEXT_DUE, due);
            }
            answer
        }
    }
}

/// The refusals of a pop's header: batch size, invisible time, orderly, the topic, the
/// names and the queue, and a group that may not consume. The topic's configuration and
/// the group's `retryMaxTimes` otherwise.
fn check_pop(
    broker: &Broker,
    header: &PopHeader,
) -> Result<(crate::broker::tables::topics::TopicConfig, i32), (i32, String)> {
    let invalid = |why: String| Err((response::INVALID_PARAMETER, why));
    if header.max_msg_nums < 1 || header.max_msg_nums > MAX_POP_BATCH {
        return invalid(format!(
            "maxMsgNums {} is outside 1..={MAX_POP_BATCH}",
            header.max_msg_nums
        ));
    }
    if header.invisible_time <= 0 || header.invisible_time > MAX_INVISIBLE_TIME_MS {
        return invalid(format!(
            "invisibleTime {} is outside 1..={MAX_INVISIBLE_TIME_MS} ms",
            header.invisible_time
        ));
    }
    if header.order {
        return invalid(
            "orderly POP is not supported; orderly consumers lock queues (LOCK_BATCH_MQ) and pull"
                .into(),
        );
    }
    let Some(topic_config) = broker.topics.get(&header.topic) else {
        return Err((
            response::TOPIC_NOT_EXIST,
            format!("topic[{}] not exist", header.topic),
        ));
    };
    if let Err(why) = names::validate_group_topic_queue(
        &header.group,
        &header.topic,
        Some(&topic_config),
        header.queue_id.max(0),
    ) {
        return invalid(why.to_string());
    }
    if header.queue_id < -1 {
        return invalid(format!(
            "queueId {} is neither a queue nor -1 (any)",
            header.queue_id
        ));
    }
    let config = broker.subscription_group(&header.group, true)?;
    Ok((topic_config, config.retry_max_times))
}

/// Why a pop ends without serving messages here.
enum Unserved {
    /// Another shard served a pop of any queue: its whole answer.
    Forwarded(RemotingCommand),
    /// The pop is answered with this code and remark.
    Refused(i32, String),
    /// Nothing came before the poll time ran out (or the connection closed); the earliest
    /// deadline in flight, if any.
    TimedOut { next_due: Option<i64> },
}

/// Pops until something is served or the poll time runs out, parked in between (woken by
/// arrivals, by a deadline in flight falling due, or by the connection closing).
async fn pop_until_served(
    broker: &Broker,
    pops: &Pops,
    request: &RemotingCommand,
    job: &Job<'_>,
    topic_config: &crate::broker::tables::topics::TopicConfig,
) -> Result<(i32, Served), Unserved> {
    let header = job.header;
    let no_park = request.opt_str(NO_PARK).is_some();
    let wait = if no_park || header.poll_time <= 0 {
        Duration::ZERO
    } else {
        Duration::from_millis(header.poll_time as u64).min(broker.config.max_suspend)
    };
    let deadline = tokio::time::Instant::now() + wait;
    let mut parked = None;
    // A pop of any queue whose queues are all this shard's is woken by this shard's
    // arrivals and deadlines alone; otherwise also by its topic's arrivals on the other
    // shards, watched from before its first look so that none is missed.
    let all_local = header.queue_id >= 0
        || (0..topic_config.read_queue_nums as i32)
            .all(|queue| broker.shard.owner(&header.topic, queue) == broker.shard.id());
    let watch = (!all_local && !wait.is_zero()).then(|| broker.pop_wakes.watch(&header.topic));
    loop {
        let arrival = broker.store.arrivals();
        let remote_arrival = watch.as_ref().map(|watch| watch.notified());
        let attempt = if header.queue_id >= 0 {
            pop_queue(broker, pops, job, header.queue_id).await
        } else {
            pop_any(broker, pops, job, request).await
        };
        let next_due = match attempt {
            Ok(Found::Served(queue_id, served)) => return Ok((queue_id, served)),
            Ok(Found::Forwarded(answer)) => return Err(Unserved::Forwarded(answer)),
            Ok(Found::Nothing { next_due }) => next_due,
            Err((code, why)) => return Err(Unserved::Refused(code, why)),
        };
        let now_instant = tokio::time::Instant::now();
        if now_instant >= deadline {
            return Err(Unserved::TimedOut { next_due });
        }
        if parked.is_none() {
            parked = Some(park(broker).map_err(|(code, why)| Unserved::Refused(code, why))?);
        }
        let mut wake = deadline;
        if let Some(due) = next_due {
            let ms = (due - broker.now_ms()).max(0) as u64;
            wake = wake.min(now_instant + Duration::from_millis(ms));
        }
        let connection = parked
            .as_ref()
            .and_then(|(_, connection)| connection.as_ref());
        let woken = async {
            match remote_arrival {
                Some(remote) => tokio::select! {
                    () = arrival => {}
                    () = remote => {}
                },
                None => arrival.await,
            }
        };
        tokio::select! {
            _ = tokio::time::timeout_at(wake, woken) => {}
            () = async {
                match connection {
                    Some(parked) => parked.closed().await,
                    None => std::future::pending().await,
                }
            } => {
                // Nobody is left to answer.
                return Err(Unserved::Refused(
                    response::POLLING_TIMEOUT,
                    "the connection closed".into(),
                ));
            }
        }
    }
}

/// Parks a pop that found nothing, within the shard's and the connection's bounds
/// (`maxParkedPulls`, `maxParkedRequestsPerConnection`): POLLING_FULL past either.
fn park(
    broker: &Broker,
) -> Result<
    (
        pull::ParkedGuard<'_>,
        Option<crate::server::backlog::Parked>,
    ),
    (i32, String),
> {
    if broker.parked.get() >= broker.config.max_parked_pulls {
        return Err((
            response::POLLING_FULL,
            format!(
                "{} requests are parked on this shard (maxParkedPulls)",
                broker.parked.get()
            ),
        ));
    }
    let connection = crate::server::backlog::try_park_current().map_err(|count| {
        (
            response::POLLING_FULL,
            format!(
                "{count} requests are parked on this connection (maxParkedRequestsPerConnection)"
            ),
        )
    })?;
    broker.parked.set(broker.parked.get() + 1);
    Ok((pull::ParkedGuard(broker), connection))
}

/// A served pop's answer, counted in the shard's metrics and the pop's get rates.
fn served_response(
    broker: &Broker,
    request: &RemotingCommand,
    header: &PopHeader,
    queue_id: i32,
    served: Served,
) -> RemotingCommand {
    ShardMetrics::add(&broker.metrics.messages_out, served.offsets.len() as u64);
    ShardMetrics::add(&broker.metrics.pop_delivered, served.offsets.len() as u64);
    let bytes = served
        .file_body
        .as_ref()
        .map_or(served.body.len() as u64, |body| body.len());
    crate::broker::state::stats_sampler::count_pop(
        broker,
        &header.topic,
        &header.group,
        served.offsets.len(),
        bytes,
    );
    let pop_time = served.pop_time;
    pop_response(
        request,
        response::SUCCESS,
        None,
        pop_time,
        header.invisible_time,
        queue_id,
        Some(served),
    )
}

/// What a pop attempt found.
enum Found {
    Served(i32, Served),
    /// Another shard served a pop of any queue: its whole answer.
    Forwarded(RemotingCommand),
    /// Nothing to hand out; the earliest deadline in flight, if any.
    Nothing {
        next_due: Option<i64>,
    },
}

struct Job<'a> {
    header: &'a PopHeader,
    filter: Option<&'a [i32]>,
    max_attempts: i32,
}

/// The tag codes a pop selects: its own expression, else the group's subscription.
fn filter_of(broker: &Broker, header: &PopHeader) -> Result<Option<Vec<i32>>, NotTag> {
    match (header.exp_type.as_deref(), header.exp.as_deref()) {
        (None | Some("TAG"), Some(exp)) => Ok(pull::tag_codes(exp)),
        (Some(other), Some(_)) if other != "TAG" => Err(NotTag(other.to_owned())),
        _ => match broker.groups.subscription(&header.group, &header.topic) {
            Some(sub) if sub.is_tag() => Ok(sub.filter_codes()),
            Some(sub) => Err(NotTag(
                sub.expression_type.as_deref().unwrap_or("").to_owned(),
            )),
            None => Ok(None),
        },
    }
}

/// A subscription expression of another type than TAG, the only one filtered here.
#[derive(Debug, thiserror::Error)]
#[error("expressionType {0} is not supported; only TAG")]
struct NotTag(String);

/// Tries every queue of the topic once, from a rotating start: this shard's here, the
/// others' through their mailboxes (without parking there).
async fn pop_any(
    broker: &Broker,
    pops: &Pops,
    job: &Job<'_>,
    request: &RemotingCommand,
) -> Result<Found, (i32, String)> {
    let queues = broker
        .topics
        .get(&job.header.topic)
        .map_or(0, |config| config.read_queue_nums);
    let start = pops.next_any.get();
    pops.next_any.set(start.wrapping_add(1));
    let mut next_due: Option<i64> = None;
    for step in 0..queues {
        let queue_id = ((start.wrapping_add(step)) % queues) as i32;
        let owner = broker.shard.owner(&job.header.topic, queue_id);
        if owner == broker.shard.id() {
            match pop_queue(broker, pops, job, queue_id).await? {
                Found::Nothing { next_due: due } => {
                    next_due = match (next_due, due) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
                found => return Ok(found),
            }
        } else {
            let mut copy = request.clone();
            copy.put_ext("queueId", queue_id);
            copy.put_ext(NO_PARK, "true");
            let peer = SocketAddr::from(([127, 0, 0, 1], 0));
            ShardMetrics::add(&broker.metrics.forwarded, 1);
            if let Some(answer) = Box::pin(broker.shard.forward(owner, copy, peer)).await {
                if answer.code == response::SUCCESS {
                    return Ok(Found::Forwarded(answer));
                }
                // A delivery in flight there falls due then: look again at that time.
                if let Ok(Some(due)) = answer.opt_i64(NEXT_DUE) {
                    next_due = Some(next_due.map_or(due, |known| known.min(due)));
                }
            }
        }
    }
    Ok(Found::Nothing { next_due })
}

/// One pop of one queue this shard owns.
async fn pop_queue(
    broker: &Broker,
    pops: &Pops,
    job: &Job<'_>,
    queue_id: i32,
) -> Result<Found, (i32, String)> {
    let header = job.header;
    let key = QueueKey::new(&header.group, &header.topic, queue_id);
    let max = header.max_msg_nums as usize;
    let pop_time = broker.now_ms();
    sync_with_committed(broker, pops, &key, header.init_mode);
    // A slave keeps a message past its retries in flight: the DLQ copy is the master's
    // to write ([`follow`]).
    let max_attempts = match is_slave(broker) {
        true => i32::MAX,
        false => job.max_attempts,
    };
    let revived = pops.table.borrow_mut().take_due(
        &key,
        pop_time,
        max,
        pop_time,
        header.invisible_time,
        max_attempts,
    );
    for dead in revived.dead {
        dead_letter(broker, pops, &key, dead).await;
    }
    let mut deliveries = revived.deliveries;
    ShardMetrics::add(&broker.metrics.pop_redelivered, deliveries.len() as u64);
    if deliveries.is_empty() {
        return pop_new_only(broker, pops, job, key, pop_time).await;
    }
    let room = max - deliveries.len();
    // The queue entries of the new offsets, read once here for the records below.
    let known = if room > 0 {
        take_new(broker, pops, job, &key, room, pop_time, &mut deliveries)?
    } else {
        Vec::new()
    };
    if deliveries.is_empty() {
        commit_watermark(broker, pops, &key);
        let next_due = pops.table.borrow().next_deadline(&key);
        return Ok(Found::Nothing { next_due });
    }
    deliveries.sort_by_key(|delivery| delivery.offset);
    store_checkpoint(
        broker,
        pops,
        &key,
        &deliveries,
        pop_time,
        header.invisible_time,
    )
    .await?;
    let (served, body) = read_deliveries(broker, pops, &key, &deliveries, &known, pop_time).await;
    commit_watermark(broker, pops, &key);
    if served.is_empty() {
        let next_due = pops.table.borrow().next_deadline(&key);
        return Ok(Found::Nothing { next_due });
    }
    let end = broker.store.max_offset(&header.topic, queue_id);
    let cursor = pops
        .table
        .borrow()
        .queue(&key)
        .map_or(end, |state| state.cursor);
    Ok(Found::Served(
        queue_id,
        Served {
            pop_time,
            offsets: served,
            body,
            file_body: None,
            rest: end.saturating_sub(cursor),
        },
    ))
}

/// Takes up to `room` new offsets of `key`'s queue from its cursor, the ones `job`'s filter
/// selects, into `deliveries` (and the table); the queue entries read, by offset.
fn take_new(
    broker: &Broker,
    pops: &Pops,
    job: &Job<'_>,
    key: &QueueKey,
    room: usize,
    pop_time: i64,
    deliveries: &mut Vec<Delivery>,
) -> Result<Vec<(u64, crate::store::consume_queue::CqEntry)>, (i32, String)> {
    let cursor = pops
        .table
        .borrow()
        .queue(key)
        .map_or(0, |state| state.cursor);
    let entries = broker
        .store
        .queue_entries(&key.topic, key.queue_id, cursor, room)
        .map_err(|error| (response::SYSTEM_ERROR, error.to_string()))?;
    let fresh: Vec<Delivery> = entries
        .iter()
        .enumerate()
        .filter(|(_, entry)| {
            job.filter
                .is_none_or(|codes| codes.contains(&(entry.tags_code as i32)))
        })
        .map(|(index, _)| Delivery {
            offset: cursor + index as u64,
            attempts: 0,
        })
        .collect();
    let next = cursor + entries.len() as u64;
    pops.table
        .borrow_mut()
        .take_new(key, &fresh, next, pop_time, job.header.invisible_time);
    deliveries.extend(fresh);
    Ok(entries
        .iter()
        .enumerate()
        .map(|(index, entry)| (cursor + index as u64, *entry))
        .collect())
}

/// Reads the records of `deliveries` into one body; the offsets served. A record that
/// cannot be read (retention took it) is consumed as gone: acknowledged, and skipped.
async fn read_deliveries(
    broker: &Broker,
    pops: &Pops,
    key: &QueueKey,
    deliveries: &[Delivery],
    known: &[(u64, crate::store::consume_queue::CqEntry)],
    pop_time: i64,
) -> (Vec<u64>, Vec<u8>) {
    let mut body = Vec::new();
    let mut served = Vec::with_capacity(deliveries.len());
    for delivery in deliveries {
        let entry = known
            .iter()
            .find(|(offset, _)| *offset == delivery.offset)
            .map(|(_, entry)| *entry);
        match read_delivery(broker, key, *delivery, entry, &mut body) {
            Ok(()) => served.push(delivery.offset),
            Err(why) => {
                tracing::warn!(
                    group = %crate::remoting::log_safe::log_safe(&key.group),
                    topic = %crate::remoting::log_safe::log_safe(&key.topic),
                    queue = key.queue_id,
                    offset = delivery.offset,
                    "popped message skipped: {why}"
                );
                let record = LogRecord::Ack {
                    key: key.clone(),
                    offsets: vec![delivery.offset],
                    pop_time,
                };
                if log_record(broker, pops, &record, pop_time).await.is_ok() {
                    pops.table.borrow_mut().ack(key, delivery.offset, pop_time);
                }
            }
        }
    }
    (served, body)
}

/// Stores the checkpoint of `deliveries` popped at `pop_time`; if it cannot be stored
/// they are given back (visible again at once) and the pop fails.
async fn store_checkpoint(
    broker: &Broker,
    pops: &Pops,
    key: &QueueKey,
    deliveries: &[Delivery],
    pop_time: i64,
    invisible_time: i64,
) -> Result<(), (i32, String)> {
    let offsets: Vec<u64> = deliveries.iter().map(|delivery| delivery.offset).collect();
    let checkpoint = LogRecord::Checkpoint {
        key: key.clone(),
        pop_time,
        invisible_time,
        deliveries: deliveries.to_vec(),
    };
    match log_record(broker, pops, &checkpoint, pop_time).await {
        Ok(Some(at)) => {
            pops.table.borrow_mut().set_ck(key, &offsets, pop_time, at);
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(why) => {
            pops.table
                .borrow_mut()
                .give_back(key, &offsets, pop_time, broker.now_ms());
            Err((response::SYSTEM_ERROR, why.to_string()))
        }
    }
}

/// A pop with nothing to hand out again: new messages from the cursor, read as the pull
/// path reads them (tag filter, transfer limits) and sent from the CommitLog files
/// without a copy. Their `reconsumeTimes` is the stored one, as a pull shows it.
async fn pop_new_only(
    broker: &Broker,
    pops: &Pops,
    job: &Job<'_>,
    key: QueueKey,
    pop_time: i64,
) -> Result<Found, (i32, String)> {
    let header = job.header;
    let cursor = pops
        .table
        .borrow()
        .queue(&key)
        .map_or(0, |state| state.cursor);
    let read = broker
        .store
        .read_messages(
            &key.topic,
            key.queue_id,
            cursor,
            header.max_msg_nums as u32,
            job.filter,
        )
        .map_err(|error| (response::SYSTEM_ERROR, error.to_string()))?;
    let next = match read.status {
        crate::store::GetStatus::Found | crate::store::GetStatus::NoMatchedMessage => {
            read.next_begin_offset.max(cursor)
        }
        _ => cursor,
    };
    let fresh: Vec<Delivery> = read
        .records
        .iter()
        .map(|record| Delivery {
            offset: record.queue_offset,
            attempts: 0,
        })
        .collect();
    pops.table
        .borrow_mut()
        .take_new(&key, &fresh, next, pop_time, header.invisible_time);
    if fresh.is_empty() {
        commit_watermark(broker, pops, &key);
        let next_due = pops.table.borrow().next_deadline(&key);
        return Ok(Found::Nothing { next_due });
    }
    store_checkpoint(broker, pops, &key, &fresh, pop_time, header.invisible_time).await?;
    commit_watermark(broker, pops, &key);
    Ok(Found::Served(
        key.queue_id,
        Served {
            pop_time,
            offsets: fresh.iter().map(|delivery| delivery.offset).collect(),
            body: Vec::new(),
            file_body: Some(read.body),
            rest: read.max_offset.saturating_sub(next),
        },
    ))
}

/// Appends the record of `delivery` to `body` as the consumer gets it: `reconsumeTimes`
/// set to the delivery's count (rewritten, with the record's CRC, only when it differs
/// from the stored one). `entry` is its queue entry when the caller has it.
fn read_delivery(
    broker: &Broker,
    key: &QueueKey,
    delivery: Delivery,
    entry: Option<crate::store::consume_queue::CqEntry>,
    body: &mut Vec<u8>,
) -> Result<(), DeliveryUnreadable> {
    let entry = match entry {
        Some(entry) => entry,
        None => broker
            .store
            .queue_entry(&key.topic, key.queue_id, delivery.offset)
            .map_err(DeliveryUnreadable::QueueEntry)?
            .ok_or(DeliveryUnreadable::Gone)?,
    };
    let bytes = broker
        .store
        .read_record(entry.phys_offset as u64, entry.size as usize)
        .map_err(DeliveryUnreadable::Record)?;
    let stored = match record::decode(&bytes, record::Verify::Structure) {
        Ok(record::Decoded::Record(view)) => view.reconsume_times,
        other => return Err(DeliveryUnreadable::NoRecord(format!("{other:?}"))),
    };
    let start = body.len();
    body.extend_from_slice(&bytes);
    if stored != delivery.attempts {
        record::set_reconsume_times(&mut body[start..], delivery.attempts)
            .map_err(DeliveryUnreadable::Rewrite)?;
    }
    Ok(())
}

/// Why a popped delivery's record cannot be handed out (it is then consumed as gone).
#[derive(Debug, thiserror::Error)]
enum DeliveryUnreadable {
    #[error("cannot read its queue entry: {0}")]
    QueueEntry(crate::store::StoreError),
    #[error("its queue entry is no longer stored")]
    Gone,
    #[error("cannot read its record: {0}")]
    Record(crate::store::StoreError),
    /// What the decoder found instead.
    #[error("the entry points at no record: {0}")]
    NoRecord(String),
    /// The store's reason the reconsume times could not be rewritten.
    #[error("{0}")]
    Rewrite(crate::store::record::ReconsumeTimesError),
}

/// Opens `key` at the group's committed offset (or by `init_mode`: 0 the queue's
/// minimum, 1 its end), and starts it over when the committed offset was changed from
/// outside (a reset, or a pull consumer's commit).
fn sync_with_committed(broker: &Broker, pops: &Pops, key: &QueueKey, init_mode: i32) {
    let committed = broker
        .consumer_offsets
        .query(&key.group, &key.topic, key.queue_id)
        .filter(|offset| *offset >= 0)
        .map(|offset| offset as u64);
    let min = broker.store.min_offset(&key.topic, key.queue_id);
    let mut table = pops.table.borrow_mut();
    let known = table.queue(key).map(|state| state.committed);
    match known {
        None => {
            let start = committed.unwrap_or(if init_mode == 1 {
                broker.store.max_offset(&key.topic, key.queue_id)
            } else {
                min
            });
            table.open(key, start.max(min));
        }
        Some(last) if committed.is_some() && committed != last => {
            table.reset(key, committed.unwrap_or(0).max(min));
        }
        Some(_) => {
            // Retention may have taken records below the cursor.
            let cursor = table.queue(key).map_or(min, |state| state.cursor);
            if cursor < min {
                table.take_new(key, &[], min, 0, 0);
            }
        }
    }
}

/// Commits `key`'s watermark as the group's offset (pull and pop share it).
fn commit_watermark(broker: &Broker, pops: &Pops, key: &QueueKey) {
    let mut table = pops.table.borrow_mut();
    let Some(mark) = table.watermark(key) else {
        return;
    };
    broker
        .consumer_offsets
        .commit(&key.group, &key.topic, key.queue_id, mark as i64);
    table.open(key, mark).committed = Some(mark);
}

/// Sends a message past the group's retry maximum to `%DLQ%<group>` through the
/// send-back path, then logs its ack; if the copy cannot be stored it is put back in
/// flight and tried again later.
async fn dead_letter(broker: &Broker, pops: &Pops, key: &QueueKey, dead: self::state::Dead) {
    let phys = broker
        .store
        .queue_entry(&key.topic, key.queue_id, dead.offset)
        .ok()
        .flatten()
        .map(|entry| entry.phys_offset);
    let stored = match phys {
        Some(phys) => {
            let mut fields = ExtFields::new();
            let phys_text = phys.to_string();
            for (name, value) in [
                ("offset", phys_text.as_str()),
                ("group", key.group.as_str()),
                ("delayLevel", "-1"),
                ("originTopic", key.topic.as_str()),
            ] {
                fields.insert(name.into(), value);
            }
            let back = RemotingCommand::request(request_code::CONSUMER_SEND_MSG_BACK, fields);
            let answer =
                Box::pin(crate::broker::requests::send_back::send_back(broker, &back)).await;
            if answer.code == response::SUCCESS {
                Ok(())
            } else {
                Err(answer.remark.unwrap_or_default())
            }
        }
        // Gone already (retention): nothing to keep.
        None => Ok(()),
    };
    match stored {
        Ok(()) => {
            let record = LogRecord::Ack {
                key: key.clone(),
                offsets: vec![dead.offset],
                pop_time: dead.pop_time,
            };
            if let Err(why) = pop_log::append(
                &broker.store,
                pops.log_queue,
                &record,
                broker.identity.store_host,
                broker.now_ms(),
            )
            .await
            {
                // The DLQ has its copy; a crash now may send it there once more.
                tracing::warn!(offset = dead.offset, "{why}");
            }
            ShardMetrics::add(&broker.metrics.pop_dead_letters, 1);
        }
        Err(why) => {
            tracing::warn!(
                group = %crate::remoting::log_safe::log_safe(&key.group),
                offset = dead.offset,
                "a POP message past its retries could not go to the DLQ; trying again: {why}"
            );
            pops.table
                .borrow_mut()
                .restore(key, dead, broker.now_ms() + DLQ_RETRY_MS);
        }
    }
}

/// The ACK and CHANGE_INVISIBLETIME fields.
struct AckHeader {
    group: String,
    topic: String,
    queue_id: i32,
    handle: ReceiptHandle,
    offset: i64,
}

/// Why an ACK or CHANGE_INVISIBLETIME header is refused: a field, or the receipt handle.
#[derive(Debug)]
enum AckHeaderError {
    Field(FieldError),
    Handle(pop_wire::HandleError),
}

impl std::fmt::Display for AckHeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AckHeaderError::Field(error) => write!(f, "{error}"),
            AckHeaderError::Handle(error) => write!(f, "{error}"),
        }
    }
}

impl std::error::Error for AckHeaderError {}

fn decode_ack(request: &RemotingCommand) -> Result<AckHeader, AckHeaderError> {
    let field = AckHeaderError::Field;
    let handle = ReceiptHandle::parse(request.get_str("extraInfo").map_err(field)?)
        .map_err(AckHeaderError::Handle)?;
    Ok(AckHeader {
        group: request.get_str("consumerGroup").map_err(field)?.to_owned(),
        topic: request.get_str("topic").map_err(field)?.to_owned(),
        queue_id: request.get_i32("queueId").map_err(field)?,
        offset: request.get_i64("offset").map_err(field)?,
        handle,
    })
}

/// Checks an ack's target names and queue; the error is (code, remark).
fn check_ack_target(broker: &Broker, header: &AckHeader) -> Result<(), (i32, String)> {
    let Some(config) = broker.topics.get(&header.topic) else {
        return Err((
            response::TOPIC_NOT_EXIST,
            format!("topic[{}] not exist", header.topic),
        ));
    };
    names::validate_group_topic_queue(&header.group, &header.topic, Some(&config), header.queue_id)
        .map_err(|why| (response::MESSAGE_ILLEGAL, why.to_string()))?;
    if header.offset < 0 {
        return Err((
            response::NO_MESSAGE,
            format!("offset {} is negative", header.offset),
        ));
    }
    Ok(())
}

fn not_in_flight(key: &QueueKey, offset: i64, pop_time: i64) -> String {
    format!(
        "no delivery of {}/{}/{} offset {offset} popped at {pop_time} is in flight \
         (acknowledged already, delivered again since, or never popped)",
        key.group, key.topic, key.queue_id
    )
}

/// ACK_MESSAGE (200051).
pub async fn ack_message(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let answer = |code, remark: Option<String>| RemotingCommand::response_to(request, code, remark);
    let header = match decode_ack(request) {
        Ok(header) => header,
        Err(why) => return answer(response::INVALID_PARAMETER, Some(why.to_string())),
    };
    if let Err((code, why)) = check_ack_target(broker, &header) {
        return answer(code, Some(why));
    }
    let pops = match serving(broker) {
        Ok(pops) => pops,
        Err(why) => return answer(response::SYSTEM_ERROR, Some(why)),
    };
    let key = QueueKey::new(&header.group, &header.topic, header.queue_id);
    match ack_offsets(
        broker,
        pops,
        &key,
        &[header.offset as u64],
        header.handle.pop_time,
    )
    .await
    {
        Ok(0) => answer(
            response::NO_MESSAGE,
            Some(not_in_flight(&key, header.offset, header.handle.pop_time)),
        ),
        Ok(_) => answer(response::SUCCESS, None),
        Err(why) => answer(response::SYSTEM_ERROR, Some(why.to_string())),
    }
}

/// Acknowledges those of `offsets` delivered at `pop_time` that are in flight: their ack
/// record is stored first, then they leave the table. How many were acknowledged.
async fn ack_offsets(
    broker: &Broker,
    pops: &Pops,
    key: &QueueKey,
    offsets: &[u64],
    pop_time: i64,
) -> Result<usize, PopLogError> {
    let live: Vec<u64> = {
        let table = pops.table.borrow();
        offsets
            .iter()
            .copied()
            .filter(|offset| table.is_inflight(key, *offset, pop_time))
            .collect()
    };
    let stale = offsets.len() - live.len();
    ShardMetrics::add(&broker.metrics.pop_stale_acks, stale as u64);
    if live.is_empty() {
        return Ok(0);
    }
    let record = LogRecord::Ack {
        key: key.clone(),
        offsets: live.clone(),
        pop_time,
    };
    log_record(broker, pops, &record, broker.now_ms()).await?;
    let mut acked = 0;
    {
        let mut table = pops.table.borrow_mut();
        for offset in live {
            // Delivered again while the record was stored: that delivery stays.
            if table.ack(key, offset, pop_time) {
                acked += 1;
            }
        }
    }
    ShardMetrics::add(&broker.metrics.pop_acks, acked as u64);
    commit_watermark(broker, pops, key);
    Ok(acked)
}

/// BATCH_ACK_MESSAGE (200151): the entries of this shard's queues are acknowledged here,
/// the others' are sent to their owners in one batch each. SUCCESS once every entry was
/// handled; entries not in flight are skipped (counted in `ringmq_pop_stale_acks_total`).
pub async fn batch_ack(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let answer = |code, remark: Option<String>| RemotingCommand::response_to(request, code, remark);
    let body: BatchAckBody = match serde_json::from_slice(&request.body) {
        Ok(body) => body,
        Err(error) => {
            return answer(
                response::INVALID_PARAMETER,
                Some(format!("bad BATCH_ACK_MESSAGE body: {error}")),
            )
        }
    };
    let pops = match serving(broker) {
        Ok(pops) => pops,
        Err(why) => return answer(response::SYSTEM_ERROR, Some(why)),
    };
    if let Err(why) = check_batch_bounds(broker, &body) {
        return answer(response::INVALID_PARAMETER, Some(why.to_string()));
    }
    let raw: serde_json::Value = serde_json::from_slice(&request.body).unwrap_or_default();
    let (local, remote) = match sort_batch(broker, &body, &raw) {
        Ok(sorted) => sorted,
        Err((code, why)) => return answer(code, Some(why)),
    };
    for (index, key, offsets, pop_time) in local {
        if let Err(why) = ack_offsets(broker, pops, &key, &offsets, pop_time).await {
            return answer(response::SYSTEM_ERROR, Some(format!("ack {index}: {why}")));
        }
    }
    for (owner, acks) in remote {
        let body = serde_json::json!({ "brokerName": body.broker_name, "acks": acks });
        let copy = RemotingCommand::request(request_code::BATCH_ACK_MESSAGE, ExtFields::new())
            .with_body(serde_json::to_vec(&body).expect("the batch serialises"));
        let peer = SocketAddr::from(([127, 0, 0, 1], 0));
        ShardMetrics::add(&broker.metrics.forwarded, 1);
        match Box::pin(broker.shard.forward(owner, copy, peer)).await {
            Some(reply) if reply.code == response::SUCCESS => {}
            Some(reply) => return answer(reply.code, reply.remark),
            None => {
                return answer(
                    response::SYSTEM_ERROR,
                    Some(format!("shard {owner} did not answer")),
                )
            }
        }
    }
    answer(response::SUCCESS, None)
}

/// A batch's bounds: `maxBatchAckEntries` entries, `maxBatchAckBitsetBytes` of bitsets in
/// all. The error is the remark.
fn check_batch_bounds(broker: &Broker, body: &BatchAckBody) -> Result<(), BatchTooBig> {
    let max_entries = broker.config.max_batch_ack_entries;
    if body.acks.len() > max_entries {
        return Err(BatchTooBig::Entries {
            entries: body.acks.len(),
            max_entries,
        });
    }
    let max_bytes = broker.config.max_batch_ack_bitset_bytes;
    let bitset_bytes: usize = body.acks.iter().map(|ack| ack.b.decoded_len()).sum();
    if bitset_bytes > max_bytes {
        return Err(BatchTooBig::Bitsets {
            bitset_bytes,
            max_bytes,
        });
    }
    Ok(())
}

/// A BATCH_ACK_MESSAGE past its bounds; the remark names the setting.
#[derive(Debug, thiserror::Error)]
enum BatchTooBig {
    #[error("{entries} acks in one batch; at most {max_entries} (maxBatchAckEntries)")]
    Entries { entries: usize, max_entries: usize },
    #[error(
        "the batch's bitsets are {bitset_bytes} bytes; at most {max_bytes} in all (maxBatchAckBitsetBytes)"
    )]
    Bitsets {
        bitset_bytes: usize,
        max_bytes: usize,
    },
}

/// One entry of a batch this shard acknowledges: its index, queue, offsets and pop time.
type LocalAck = (usize, QueueKey, Vec<u64>, i64);
/// The entries of a batch for each other shard, as the client wrote them.
type RemoteAcks = std::collections::BTreeMap<u8, Vec<serde_json::Value>>;

/// Checks every entry of a batch (so a batch is refused whole, before any entry is
/// acknowledged) and sorts them: this shard's, with their offsets, and the others' by
/// owner.
fn sort_batch(
    broker: &Broker,
    body: &BatchAckBody,
    raw: &serde_json::Value,
) -> Result<(Vec<LocalAck>, RemoteAcks), (i32, String)> {
    let raw_acks = raw.get("acks").and_then(|acks| acks.as_array());
    let mut remote = RemoteAcks::new();
    let mut local: Vec<LocalAck> = Vec::new();
    for (index, ack) in body.acks.iter().enumerate() {
        if ack
            .r
            .as_deref()
            .is_some_and(|mark| mark != pop_wire::NORMAL_TOPIC_MARK)
        {
            return Err((
                response::INVALID_PARAMETER,
                format!(
                    "ack {index}: mark {:?}; this node hands out only mark 0",
                    ack.r
                ),
            ));
        }
        let header = AckHeader {
            group: ack.c.clone(),
            topic: ack.t.clone(),
            queue_id: ack.q,
            handle: ReceiptHandle {
                start_offset: ack.so,
                pop_time: ack.pt,
                invisible_time: ack.it,
                revive_qid: ack.rq,
                mark: pop_wire::NORMAL_TOPIC_MARK.into(),
                broker_name: String::new(),
                queue_id: ack.q,
                queue_offset: None,
            },
            offset: ack.so,
        };
        check_ack_target(broker, &header)
            .map_err(|(code, why)| (code, format!("ack {index}: {why}")))?;
        let owner = broker.shard.owner(&ack.t, ack.q);
        if owner != broker.shard.id() {
            if let Some(entry) = raw_acks.and_then(|acks| acks.get(index)) {
                remote.entry(owner).or_default().push(entry.clone());
            }
            continue;
        }
        let max_bytes = broker.config.max_batch_ack_bitset_bytes;
        let bits = ack
            .b
            .indexes(MAX_POP_BATCH as usize, max_bytes)
            .map_err(|why| (response::INVALID_PARAMETER, format!("ack {index}: {why}")))?;
        let offsets: Vec<u64> = bits.iter().map(|bit| ack.so as u64 + bit).collect();
        local.push((index, QueueKey::new(&ack.c, &ack.t, ack.q), offsets, ack.pt));
    }
    Ok((local, remote))
}

/// CHANGE_MESSAGE_INVISIBLETIME (200053): a new checkpoint for the offset at `now` with
/// the new invisible time; the old handle is void once it is stored.
pub async fn change_invisible_time(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let now = broker.now_ms();
    let invisible = request.opt_i64("invisibleTime").ok().flatten().unwrap_or(0);
    let respond = |code, remark: Option<String>, pop_time: i64, revive_qid: i32| {
        let mut answer = RemotingCommand::response_to(request, code, remark);
        answer.put_ext("popTime", pop_time);
        answer.put_ext("invisibleTime", invisible);
        answer.put_ext("reviveQid", revive_qid);
        answer
    };
    let header = match decode_ack(request) {
        Ok(header) => header,
        Err(why) => return respond(response::INVALID_PARAMETER, Some(why.to_string()), now, 0),
    };
    let revive_qid = header.handle.revive_qid;
    if invisible <= 0 || invisible > MAX_INVISIBLE_TIME_MS {
        return respond(
            response::INVALID_PARAMETER,
            Some(format!(
                "invisibleTime {invisible} is outside 1..={MAX_INVISIBLE_TIME_MS} ms"
            )),
            now,
            revive_qid,
        );
    }
    if let Err((code, why)) = check_ack_target(broker, &header) {
        return respond(code, Some(why), now, revive_qid);
    }
    let pops = match serving(broker) {
        Ok(pops) => pops,
        Err(why) => return respond(response::SYSTEM_ERROR, Some(why), now, revive_qid),
    };
    // The new handle must differ from the old one, which is named by its pop time: a change
    // in the same millisecond as the pop takes the next one.
    let now = now.max(header.handle.pop_time.saturating_add(1));
    match change_deadline(broker, pops, &header, now, invisible).await {
        Ok(()) => respond(response::SUCCESS, None, now, revive_qid),
        Err((code, why)) => respond(code, Some(why), now, revive_qid),
    }
}

/// Gives the delivery `header` names (still in flight under its handle) a new pop time,
/// `now`, and invisible time, once a checkpoint saying so is stored. NO_MESSAGE if the
/// handle is stale.
async fn change_deadline(
    broker: &Broker,
    pops: &Pops,
    header: &AckHeader,
    now: i64,
    invisible: i64,
) -> Result<(), (i32, String)> {
    let key = QueueKey::new(&header.group, &header.topic, header.queue_id);
    let offset = header.offset as u64;
    let old = header.handle.pop_time;
    let stale = || {
        (
            response::NO_MESSAGE,
            not_in_flight(&key, header.offset, old),
        )
    };
    let attempts = {
        let table = pops.table.borrow();
        if !table.is_inflight(&key, offset, old) {
            drop(table);
            ShardMetrics::add(&broker.metrics.pop_stale_acks, 1);
            return Err(stale());
        }
        table
            .queue(&key)
            .and_then(|state| state.get(offset))
            .map_or(0, |entry| entry.attempts)
    };
    let checkpoint = LogRecord::Checkpoint {
        key: key.clone(),
        pop_time: now,
        invisible_time: invisible,
        deliveries: vec![Delivery { offset, attempts }],
    };
    let at = log_record(broker, pops, &checkpoint, now)
        .await
        .map_err(|why| (response::SYSTEM_ERROR, why.to_string()))?;
    let mut table = pops.table.borrow_mut();
    if table
        .change_invisible(&key, offset, old, now, invisible)
        .is_none()
    {
        return Err(stale());
    }
    if let Some(at) = at {
        table.set_ck(&key, &[offset], now, at);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record::{encode_into, Decoded, RecordInput, Verify};

    fn record(born_v6: bool) -> Vec<u8> {
        let host: SocketAddr = if born_v6 {
            "[::2]:9".parse().unwrap()
        } else {
            "10.0.0.2:9".parse().unwrap()
        };
        let input = RecordInput {
            topic: "T".into(),
            queue_id: 1,
            flag: 0,
            sys_flag: 0,
            born_timestamp: 1,
            born_host: host,
            store_host: "10.0.0.1:10911".parse().unwrap(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: bytes::Bytes::from_static(b"hello"),
            properties: String::new(),
            body_crc: record::body_crc(b"hello"),
        };
        let mut out = Vec::new();
        encode_into(&input, 0, 0, 0, &mut out).unwrap();
        out
    }

    #[test]
    fn the_delivered_copy_carries_its_reconsume_times() {
        for v6 in [false, true] {
            let mut bytes = record(v6);
            record::set_reconsume_times(&mut bytes, 7).unwrap();
            match record::decode(&bytes, Verify::Full) {
                Ok(Decoded::Record(view)) => {
                    assert_eq!(view.reconsume_times, 7, "v6 born host: {v6}");
                    assert_eq!(view.body, b"hello");
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(record::set_reconsume_times(&mut [0u8; 8], 1).is_err());
        let mut two = record(false);
        two.extend(record(false));
        assert!(
            record::set_reconsume_times(&mut two, 1).is_err(),
            "two records"
        );
    }
}
