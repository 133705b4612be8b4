//! SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) (reference §9.3, §6.3).
//!
//! A send becomes a [`RecordInput`]: born host = the connection's peer (IPv4-mapped IPv6
//! normalised to IPv4), store host = the broker's advertised address, properties from the
//! header plus `CLUSTER` (as Java adds) and a generated `UNIQ_KEY` when the producer sent none.
//!
//! Invariants:
//! - Every send response that reports a stored message (SUCCESS, FLUSH_DISK_TIMEOUT,
//!   FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE: the store's [`PutStatus`]) carries `msgId`,
//!   `queueId`, `queueOffset` and `transactionId`: clients unbox them.
//! - A send to a topic only the node writes ([`names::is_not_allowed_send_topic`]) is
//!   refused with NO_PERMISSION and Java's remark, and creates nothing.
//! - The client's properties are normalised before the node appends its pairs, so each
//!   pair the client sent keeps its value and the appended ones parse whole.
//! - Store errors map as Java's `handlePutMessageResult`: MessageIllegal → MESSAGE_ILLEGAL,
//!   Busy → SYSTEM_BUSY (clients retry), unavailable states → SERVICE_NOT_AVAILABLE, the rest
//!   SYSTEM_ERROR, always with the store's text as remark.
//!
//! A single-message send whose properties carry `DELAY` above 0 is stored to
//! `SCHEDULE_TOPIC_XXXX` queue `level - 1` instead ([`crate::broker::delay`]); its response names
//! the queue asked for with the scheduled record's `queueOffset` and `msgId`, as Java's.
//! The request was routed to that queue's owner ([`Broker`]'s routing), where the level's
//! scheduler runs and is woken once the record is visible. A batch header asking for a
//! delay is refused (MESSAGE_ILLEGAL).
//!
//! A batch is queued in the store whole ([`crate::store::Store::put_all`]), so its
//! messages share one CommitLog write (when they fit the appender's batch bytes) and get
//! consecutive queue offsets. Unlike Java's, a batch is not atomic: a refusal part-way
//! leaves the earlier messages stored (the error remark says how many).

use std::net::SocketAddr;
use std::rc::Rc;

use crate::remoting::codes::response;
use crate::remoting::send_header::{decode_batch, SendMessageRequestHeader};
use crate::remoting::RemotingCommand;
use crate::store::record::{body_crc, RecordInput};
use crate::store::replica::StoreRole;
use crate::store::topic::{SCHEDULE_TOPIC, TIMER_TOPIC};
use crate::store::{properties, PutResult, PutStatus, StoreError};

use crate::broker::tables::persisted_table::WriteFailed;
use crate::broker::tables::topics::{TopicConfig, PERM_WRITE};
use crate::broker::{bad_header, delay, naming::ids, naming::names, timer, transaction, Broker};

/// `MessageConst.PROPERTY_CLUSTER`, which the Java broker stamps on every sent message.
const CLUSTER: &str = "CLUSTER";
/// The sysFlag bits the encoder derives from the hosts; a client's values are ignored.
const HOST_FAMILY_BITS: i32 = 0x10 | 0x20;

/// The response code for a store error, as §6.3 maps put statuses.
fn error_code(error: &StoreError) -> i32 {
    match error {
        StoreError::MessageIllegal(_) => response::MESSAGE_ILLEGAL,
        StoreError::Busy(_) => response::SYSTEM_BUSY,
        StoreError::Poisoned(_)
        | StoreError::DiskFull(_)
        | StoreError::ShuttingDown
        | StoreError::Replica
        | StoreError::LeaseLapsed => response::SERVICE_NOT_AVAILABLE,
        _ => response::SYSTEM_ERROR,
    }
}

fn error_response(request: &RemotingCommand, error: &StoreError) -> RemotingCommand {
    RemotingCommand::response_to(request, error_code(error), Some(error.to_string()))
}

impl Broker {
    /// Checks what the header says before anything is stored: the queue id to store into,
    /// or the refusal's code and remark. The topic must exist in the topic table or be
    /// creatable (auto-create, system topics); the queue id must be below its write
    /// queue count.
    fn check_send_header(&self, header: &SendMessageRequestHeader) -> Result<i32, (i32, String)> {
        // A slave's log is its master's (D14): refused before the topic check, so a send
        // to a slave never creates a topic there either. RocketMQ's status and words.
        if self.store().role() == StoreRole::Replica {
            return Err((
                response::SERVICE_NOT_AVAILABLE,
                "message store is slave mode, so putting message is forbidden".into(),
            ));
        }
        if let Err(why) = names::validate_topic(&header.topic) {
            return Err((response::MESSAGE_ILLEGAL, why.to_string()));
        }
        // Before `get_or_create`: a refused send must not create the system topic either.
        if names::is_not_allowed_send_topic(&header.topic) {
            return Err((
                response::NO_PERMISSION,
                names::not_allowed_send_remark(&header.topic),
            ));
        }
        let config = self
            .topics
            .get_or_create(&header.topic, || self.clock.now_ms())?;
        if config.perm & PERM_WRITE == 0 {
            return Err((
                response::NO_PERMISSION,
                format!("the topic[{}] sending message is forbidden", header.topic),
            ));
        }
        let queues = config.write_queue_nums.max(1);
        if header.queue_id >= queues as i32 {
            // Java's `msgCheck` answers SYSTEM_ERROR for a queue id past the write queues.
            return Err((
                response::SYSTEM_ERROR,
                format!(
                    "request queueId[{}] is illegal: topic {} has {} write queues",
                    header.queue_id, header.topic, queues
                ),
            ));
        }
        Ok(if header.queue_id < 0 {
            // "The broker picks": round-robin over the topic's write queues.
            let next = self.next_queue.get();
            self.next_queue.set(next.wrapping_add(1));
            (next % queues) as i32
        } else {
            header.queue_id
        })
    }

    /// The record for one message: `properties` are the message's own, UNIQ_KEY and CLUSTER
    /// are added here, after the client's string is normalised (its last pair terminated),
    /// so an appended pair never runs into the client's last value. Returns the record and
    /// its UNIQ_KEY.
    fn record_for(
        &self,
        header: &SendMessageRequestHeader,
        queue_id: i32,
        peer: SocketAddr,
        flag: i32,
        body: bytes::Bytes,
        own_properties: &str,
    ) -> (RecordInput, String) {
        let normalized = properties::normalized(own_properties);
        let cluster = self.identity.cluster_name.as_str();
        // One allocation: room for the pairs added below (a UNIQ_KEY is 32 hex digits).
        let mut properties = String::with_capacity(
            normalized.len() + properties::UNIQ_KEY.len() + 34 + CLUSTER.len() + cluster.len() + 2,
        );
        properties.push_str(&normalized);
        let uniq_key = match properties::get(&properties, properties::UNIQ_KEY) {
            Some(key) => key.to_owned(),
            None => {
                let key = self.uniq_keys.next(self.clock.now_ms());
                properties::push_pair(&mut properties, properties::UNIQ_KEY, &key);
                key
            }
        };
        if properties::get(&properties, CLUSTER).is_none() {
            properties::push_pair(&mut properties, CLUSTER, cluster);
        }
        let record = RecordInput {
            topic: header.topic.clone(),
            queue_id,
            flag,
            sys_flag: header.sys_flag & !HOST_FAMILY_BITS,
            born_timestamp: header.born_timestamp,
            born_host: ids::normalize(peer),
            store_host: self.identity.store_host,
            reconsume_times: header.reconsume_times,
            prepared_transaction_offset: 0,
            body_crc: body_crc(&body),
            body,
            properties,
        };
        (record, uniq_key)
    }
}

/// The offset msgId of a stored message; empty when the store did not say where it went
/// (a FlushDiskTimeout before encoding), as Java's default would be.
fn msg_id(store_host: SocketAddr, result: &PutResult) -> String {
    result
        .placement
        .map(|placement| ids::offset_msg_id(store_host, placement.phys_offset))
        .unwrap_or_default()
}

/// The response code of a stored message, as Java's `handlePutMessageResult`: each says
/// which acknowledgement the message did not get (the store's reason), none is an error.
fn status_code(status: PutStatus) -> i32 {
    match status {
        PutStatus::Ok => response::SUCCESS,
        PutStatus::FlushDiskTimeout => response::FLUSH_DISK_TIMEOUT,
        PutStatus::FlushSlaveTimeout => response::FLUSH_SLAVE_TIMEOUT,
        PutStatus::SlaveNotAvailable => response::SLAVE_NOT_AVAILABLE,
    }
}

/// The status a batch answers with, given the worst so far and one message's: any
/// shortfall beats Ok, and the replica's beat the flush's, as Java applies the replica
/// status after the flush status (reference §6.2).
fn worse(worst: PutStatus, status: PutStatus) -> PutStatus {
    let rank = |status: PutStatus| match status {
        PutStatus::Ok => 0,
        PutStatus::FlushDiskTimeout => 1,
        PutStatus::FlushSlaveTimeout => 2,
        PutStatus::SlaveNotAvailable => 3,
    };
    if rank(status) > rank(worst) {
        status
    } else {
        worst
    }
}

/// The send header of either version, checked against the topic table, with the queue
/// id to use; or the refusal to answer with.
fn checked_header(
    broker: &Broker,
    request: &RemotingCommand,
) -> Result<(SendMessageRequestHeader, i32), Box<RemotingCommand>> {
    let header = SendMessageRequestHeader::from_command(request)
        .map_err(|error| Box::new(bad_header(request, error)))?;
    let queue_id = broker
        .check_send_header(&header)
        .map_err(|(code, remark)| {
            Box::new(RemotingCommand::response_to(request, code, Some(remark)))
        })?;
    Ok((header, queue_id))
}

/// SEND_MESSAGE and SEND_MESSAGE_V2: one message.
pub async fn send_message(
    broker: &Broker,
    request: &RemotingCommand,
    peer: SocketAddr,
) -> RemotingCommand {
    let (record, pending) = match prepare_send(broker, request, peer) {
        Ok(prepared) => prepared,
        Err(refusal) => return *refusal,
    };
    let outcome = broker.store.put(record).await;
    pending.finish(outcome)
}

/// [`send_message`] without awaiting: `respond` gets the response once the store has
/// decided (at once for a refusal), from whatever runs on this shard then. What lets the
/// connection take a send without a task
/// ([`crate::server::connection::RequestHandler::handle_now`]).
pub fn send_message_then(
    broker: &Broker,
    request: &RemotingCommand,
    peer: SocketAddr,
    respond: impl FnOnce(RemotingCommand) + 'static,
) {
    match prepare_send(broker, request, peer) {
        Ok((record, pending)) => broker
            .store
            .put_with(record, move |outcome| respond(pending.finish(outcome))),
        Err(refusal) => respond(*refusal),
    }
}

/// The record of a checked single-message send, and what its response needs later.
fn prepare_send(
    broker: &Broker,
    request: &RemotingCommand,
    peer: SocketAddr,
) -> Result<(RecordInput, PendingSend), Box<RemotingCommand>> {
    let (header, queue_id) = checked_header(broker, request)?;
    let refuse = |code: i32, remark: String| {
        Box::new(RemotingCommand::response_to(request, code, Some(remark)))
    };
    let level = delay::requested_level(
        &header.properties,
        header.sys_flag,
        &broker.config.delay_levels,
    )
    .map_err(|remark| refuse(response::MESSAGE_ILLEGAL, remark.to_string()))?;
    let (mut record, uniq_key) = broker.record_for(
        &header,
        queue_id,
        peer,
        header.flag,
        request.body.clone(),
        &header.properties,
    );
    let mut wake = None;
    if transaction::halves::is_prepared(&header.properties, header.sys_flag) {
        // Never delayed while prepared (`requested_level` and `timer_due` said none): the
        // commit is, if the message asks.
        transaction::prepare(broker, &mut record, &uniq_key)
            .map_err(|(code, remark)| refuse(code, remark))?;
    } else if let Some(level) = level {
        let schedule_queue = level as i32 - 1;
        // The routing sent it here (`Broker::owner_of`); a record on another shard's
        // queue would never be delivered.
        let owner = broker.shard.owner(SCHEDULE_TOPIC, schedule_queue);
        if owner != broker.shard.id() {
            return Err(refuse(
                response::SYSTEM_ERROR,
                format!(
                    "delay level {level} is scheduled by shard {owner}, not by shard {}",
                    broker.shard.id()
                ),
            ));
        }
        ensure_schedule_topic(broker)
            .map_err(|remark| refuse(response::SYSTEM_ERROR, remark.to_string()))?;
        delay::schedule(&mut record, level);
        wake = Some(broker.delay_wake(level).clone());
    } else if let Some(due) =
        timer_due(broker, &header).map_err(|(code, remark)| refuse(code, remark))?
    {
        let timers = broker
            .timers
            .get()
            .ok_or_else(|| refuse(response::SYSTEM_ERROR, "the timer store is not open".into()))?;
        let queue_end = broker.store.max_offset(TIMER_TOPIC, timers.queue);
        let pending = timers.pending(queue_end);
        if pending >= broker.config.timer_max_pending {
            return Err(refuse(
                response::SYSTEM_ERROR,
                format!(
                    "timer messages are under flow control: {pending} wait on this shard, timerMaxPending allows {}",
                    broker.config.timer_max_pending
                ),
            ));
        }
        ensure_timer_topic(broker)
            .map_err(|remark| refuse(response::SYSTEM_ERROR, remark.to_string()))?;
        timer::schedule(&mut record, due, timers.queue);
        wake = Some(timers.wake.clone());
    }
    let pending = PendingSend {
        answer: RemotingCommand::response_to(request, response::SUCCESS, None),
        queue_id,
        uniq_key,
        store_host: broker.identity.store_host,
        wake,
    };
    Ok((record, pending))
}

/// The due time a single-message send asks for ([`timer::requested_due`]), or its refusal:
/// MESSAGE_ILLEGAL for a bad value, SYSTEM_ERROR when `timerWheelEnable` is off.
fn timer_due(
    broker: &Broker,
    header: &SendMessageRequestHeader,
) -> Result<Option<i64>, (i32, String)> {
    let due = timer::requested_due(
        &header.properties,
        header.sys_flag,
        || broker.clock.now_ms(),
        broker.config.timer_max_delay_sec,
    )
    .map_err(|remark| (response::MESSAGE_ILLEGAL, remark.to_string()))?;
    if due.is_some() && !broker.config.timer_enabled {
        return Err((
            response::SYSTEM_ERROR,
            "timer messages are not enabled here (timerWheelEnable=false)".into(),
        ));
    }
    Ok(due)
}

/// A system topic the first send that needs it could not create; the remark names it.
#[derive(Debug)]
pub(crate) struct TopicNotCreated {
    topic: &'static str,
    failed: WriteFailed,
}

impl std::fmt::Display for TopicNotCreated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot create topic {}: {}", self.topic, self.failed)
    }
}

impl std::error::Error for TopicNotCreated {}

/// Creates system topic `topic` with `queues` queues in the topic table if it is not
/// there.
pub(crate) fn ensure_system_topic(
    broker: &Broker,
    topic: &'static str,
    queues: u32,
) -> Result<(), TopicNotCreated> {
    if broker.topics.get(topic).is_some() {
        return Ok(());
    }
    broker
        .topics
        .put(TopicConfig::new(topic, queues), broker.clock.now_ms())
        .map_err(|failed| TopicNotCreated { topic, failed })
}

/// Creates `rmq_sys_wheel_timer` in the topic table, one queue per shard, if it is not
/// there (the first timer send does).
pub(crate) fn ensure_timer_topic(broker: &Broker) -> Result<(), TopicNotCreated> {
    ensure_system_topic(broker, TIMER_TOPIC, broker.shard.count() as u32)
}

/// Creates `SCHEDULE_TOPIC_XXXX` in the topic table, one queue per level, if it is not
/// there (Java creates it at start; here the first delayed send does).
pub(crate) fn ensure_schedule_topic(broker: &Broker) -> Result<(), TopicNotCreated> {
    ensure_system_topic(
        broker,
        SCHEDULE_TOPIC,
        broker.config.delay_levels.max_level(),
    )
}

/// A single-message send waiting for the store: its response so far and the fields the
/// final one needs. Owns no reference to the broker, so it can sit in the store's queue.
struct PendingSend {
    answer: RemotingCommand,
    queue_id: i32,
    uniq_key: String,
    store_host: SocketAddr,
    /// A delayed message's scheduler, woken once the record is visible.
    wake: Option<Rc<tokio::sync::Notify>>,
}

impl PendingSend {
    fn finish(self, outcome: Result<PutResult, StoreError>) -> RemotingCommand {
        let mut answer = self.answer;
        match outcome {
            Ok(result) => {
                if let Some(wake) = &self.wake {
                    wake.notify_one();
                }
                answer.code = status_code(result.status);
                // Added in key order into room for all six, so each insert appends; the two
                // ids move in as the Strings they are, without a copy.
                answer.ext_fields.reserve(6);
                add_region(&mut answer);
                // A FlushDiskTimeout before encoding has no placement; the fields must still
                // be there, so they say "unknown" the way Java's defaults would.
                answer
                    .ext_fields
                    .insert("msgId".into(), msg_id(self.store_host, &result));
                answer.put_ext("queueId", self.queue_id);
                answer.put_ext(
                    "queueOffset",
                    result
                        .placement
                        .map_or(-1, |placement| placement.queue_offset as i64),
                );
                answer
                    .ext_fields
                    .insert("transactionId".into(), self.uniq_key);
            }
            Err(error) => {
                answer.code = error_code(&error);
                answer.remark = Some(error.to_string());
            }
        }
        answer
    }
}

/// The extFields Java adds to every send response.
fn add_region(answer: &mut RemotingCommand) {
    answer.put_ext("MSG_REGION", "DefaultRegion");
    answer.put_ext("TRACE_ON", "true");
}

/// SEND_BATCH_MESSAGE: the messages of the batch body, in order.
pub async fn send_batch(
    broker: &Broker,
    request: &RemotingCommand,
    peer: SocketAddr,
) -> RemotingCommand {
    let (header, queue_id) = match checked_header(broker, request) {
        Ok(checked) => checked,
        Err(refusal) => return *refusal,
    };
    let illegal = |remark: String| {
        RemotingCommand::response_to(request, response::MESSAGE_ILLEGAL, Some(remark))
    };
    if let Err(why) = check_batch_is_plain(broker, &header) {
        return illegal(why.into());
    }
    let items = match decode_batch(&request.body) {
        Ok(items) if !items.is_empty() => items,
        Ok(_) => return illegal("the batch body holds no message".into()),
        Err(error) => return illegal(format!("bad batch body: {error}")),
    };
    // RocketMQ's client refuses a transactional batch before sending; a raw one would
    // otherwise become messages consumers read before the transaction is decided.
    if items
        .iter()
        .any(|item| transaction::halves::is_prepared(&item.properties, header.sys_flag))
    {
        return illegal(
            "a batch cannot be a transactional (prepared) message; send transactional messages one by one".into(),
        );
    }
    let mut uniq_keys = Vec::with_capacity(items.len());
    let records: Vec<RecordInput> = items
        .into_iter()
        .map(|item| {
            let (record, uniq_key) = broker.record_for(
                &header,
                queue_id,
                peer,
                item.flag,
                item.body,
                &item.properties,
            );
            uniq_keys.push(uniq_key);
            record
        })
        .collect();
    let outcomes = broker.store.put_all(records).await;
    let stored = match batch_stored(broker, outcomes) {
        Ok(stored) => stored,
        Err((index, error)) => {
            let mut answer = error_response(request, &error);
            if index > 0 {
                answer.remark = Some(format!(
                    "{error} (the first {index} messages of the batch were stored)"
                ));
            }
            return answer;
        }
    };
    let mut answer = RemotingCommand::response_to(request, status_code(stored.worst), None);
    answer.put_ext("msgId", stored.msg_ids.join(","));
    answer.put_ext("queueId", queue_id);
    answer.put_ext(
        "queueOffset",
        stored.first_offset.map_or(-1, |offset| offset as i64),
    );
    answer.put_ext("transactionId", uniq_keys.join(","));
    add_region(&mut answer);
    answer
}

/// A batch may be neither delayed nor a timer message: those are sent one by one. The
/// error is the remark the refusal carries.
fn check_batch_is_plain(
    broker: &Broker,
    header: &SendMessageRequestHeader,
) -> Result<(), &'static str> {
    let level = delay::requested_level(
        &header.properties,
        header.sys_flag,
        &broker.config.delay_levels,
    );
    if !matches!(level, Ok(None)) {
        return Err("a batch cannot be delayed (DELAY); send delayed messages one by one");
    }
    if !matches!(timer_due(broker, header), Ok(None)) {
        return Err("a batch cannot be a timer message (TIMER_*); send timer messages one by one");
    }
    Ok(())
}

/// What a whole batch's puts came to.
struct BatchStored {
    msg_ids: Vec<String>,
    first_offset: Option<u64>,
    /// The status that answers the batch: the worst of its puts'.
    worst: PutStatus,
}

/// The batch's puts, in order; the first that failed, with how many were stored before it.
fn batch_stored(
    broker: &Broker,
    outcomes: Vec<Result<PutResult, StoreError>>,
) -> Result<BatchStored, (usize, StoreError)> {
    let mut stored = BatchStored {
        msg_ids: Vec::with_capacity(outcomes.len()),
        first_offset: None,
        worst: PutStatus::Ok,
    };
    for (index, outcome) in outcomes.into_iter().enumerate() {
        let result = outcome.map_err(|error| (index, error))?;
        stored.worst = worse(stored.worst, result.status);
        if stored.first_offset.is_none() {
            stored.first_offset = result.placement.map(|placement| placement.queue_offset);
        }
        stored
            .msg_ids
            .push(msg_id(broker.identity.store_host, &result));
    }
    Ok(stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reason_a_put_was_not_acknowledged_answers_its_rocketmq_code() {
        assert_eq!(status_code(PutStatus::Ok), 0);
        assert_eq!(status_code(PutStatus::FlushDiskTimeout), 10);
        assert_eq!(status_code(PutStatus::SlaveNotAvailable), 11);
        assert_eq!(status_code(PutStatus::FlushSlaveTimeout), 12);
    }

    #[test]
    fn a_batch_answers_its_worst_status_the_replicas_over_the_flushs() {
        use PutStatus::*;
        let batch = |statuses: &[PutStatus]| statuses.iter().copied().fold(Ok, worse);
        assert_eq!(batch(&[Ok, Ok]), Ok);
        assert_eq!(batch(&[Ok, FlushDiskTimeout, Ok]), FlushDiskTimeout);
        assert_eq!(
            batch(&[FlushSlaveTimeout, FlushDiskTimeout]),
            FlushSlaveTimeout
        );
        assert_eq!(
            batch(&[FlushDiskTimeout, SlaveNotAvailable]),
            SlaveNotAvailable
        );
    }
}
