//! A POP group's committed offset moved from outside: an operator's reset
//! (INVOKE_BROKER_TO_RESET_OFFSET, [`crate::broker::admin::reset_offset`]) or a commit
//! (UPDATE_CONSUMER_OFFSET, mqadmin's fallback, a pull consumer of the group) that differs
//! from what the shard's POP table last reported for the queue.
//!
//! What happens, on the shard that owns the queue: a reset record is appended to the
//! revive log ([`crate::broker::pop::log`], as durable as a send), then the queue starts over at
//! the new offset (clamped to what the queue holds) and forgets what it had in flight.
//! Deliveries in flight at the reset are void: their acks are answered NO_MESSAGE (not in
//! flight), they are not handed out again because of their invisible time, and messages
//! from the new offset on are handed out as new (reconsume times 0). A reset backwards
//! therefore hands those messages out again; a reset forwards skips them.
//!
//! Invariant: the table is changed only after its reset record is stored, so a restart
//! (clean or not) replays the reset and never brings back the offsets before it (before
//! reset records existed, the replay mark and the checkpoints before it did, with the
//! whole backlog). A queue this shard never popped has no table entry and needs no
//! record: a replay opens it at the committed offset.

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::pop::log::PopLogError;
use crate::broker::pop::state::{LogRecord, QueueKey};
use crate::broker::requests::consumer_offset_requests;
use crate::broker::Broker;

/// Starts `key` over at `offset` if this shard's POP table knows it at another committed
/// offset; the reset record is stored first. Whether the table changed.
pub async fn outside_commit(
    broker: &Broker,
    key: &QueueKey,
    offset: u64,
) -> Result<bool, PopLogError> {
    // A slave writes no reset record (its log only copies its master's): a commit made on
    // it reaches the master, which starts the queue over there, and the slave's table
    // follows the master's record.
    if broker.store().role() == crate::store::replica::StoreRole::Replica {
        return Ok(false);
    }
    let Some(pops) = broker.pops.get() else {
        return Ok(false);
    };
    let offset = offset.max(broker.store.min_offset(&key.topic, key.queue_id));
    let stale = {
        let table = pops.table.borrow();
        match table.queue(key) {
            None => false,
            Some(state) => state.committed != Some(offset) || table.watermark(key) != Some(offset),
        }
    };
    if !stale {
        return Ok(false);
    }
    let record = LogRecord::Reset {
        key: key.clone(),
        offset,
    };
    crate::broker::pop::log::append(
        &broker.store,
        pops.log_queue,
        &record,
        broker.identity.store_host,
        broker.now_ms(),
    )
    .await?;
    let mut table = pops.table.borrow_mut();
    let dropped = table.queue(key).map_or(0, |state| state.inflight());
    table.apply(&record, 0, |_| offset);
    tracing::info!(
        group = %crate::remoting::log_safe::log_safe(&key.group),
        topic = %crate::remoting::log_safe::log_safe(&key.topic),
        queue = key.queue_id,
        offset,
        dropped,
        "POP queue started over at a committed offset moved from outside"
    );
    Ok(true)
}

/// UPDATE_CONSUMER_OFFSET (15): the commit, then, for a queue this shard pops, the
/// reset it implies ([`outside_commit`]). SYSTEM_ERROR if that reset cannot be stored (the
/// commit holds until a restart, which would undo it).
pub async fn update_consumer_offset(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let answer = consumer_offset_requests::update(broker, request);
    if answer.code != response::SUCCESS {
        return answer;
    }
    // `update` checked every field.
    let (Ok(group), Ok(topic), Ok(queue_id), Ok(offset)) = (
        request.get_str("consumerGroup"),
        request.get_str("topic"),
        request.get_i32("queueId"),
        request.get_i64("commitOffset"),
    ) else {
        return answer;
    };
    let key = QueueKey::new(group, topic, queue_id);
    match outside_commit(broker, &key, offset as u64).await {
        Ok(_) => answer,
        Err(why) => {
            RemotingCommand::response_to(request, response::SYSTEM_ERROR, Some(why.to_string()))
        }
    }
}
