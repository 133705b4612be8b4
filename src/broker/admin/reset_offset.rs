//! INVOKE_BROKER_TO_RESET_OFFSET (222), `mqadmin resetOffsetByTime`: moves a consumer
//! group's committed offsets on a topic to the first message stored at or after a time,
//! and tells the group's live clients with RESET_CONSUMER_CLIENT_OFFSET (220).
//!
//! Header: `topic`, `group`, `timestamp` (ms; -1 means each queue's end), `isForce`,
//! optionally `queueId` (default -1: every read queue) and `offset` (with a `queueId`: that
//! queue goes to exactly this offset, clamped to what the queue holds). The answer and the
//! clients' notice carry a `ResetOffsetBody` in fastjson's shape ([`crate::broker::admin::admin_json`]):
//! `{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:4}}`.
//!
//! Per queue, as in Java's `Broker2Client.resetOffset`: the target is the offset of the
//! first message stored at or after `timestamp` (a time before the oldest message gives
//! the queue's minimum, a time after the newest its maximum); without `isForce` a queue
//! only moves back, never past what the group committed.
//!
//! Where ringmq differs, on purpose:
//! - The node writes the new offsets itself, on every queue, before it answers: the reset
//!   holds whether or not a client is online (Java answers CONSUMER_NOT_ONLINE when none
//!   is, and mqadmin then writes the offsets itself through UPDATE_CONSUMER_OFFSET). Live
//!   clients are still told, so they drop what they hold and pull from the new offsets.
//! - An unknown topic is TOPIC_NOT_EXIST (17) and a group with neither a committed offset
//!   on the topic nor a live client is SUBSCRIPTION_GROUP_NOT_EXIST (26), rather than
//!   Java's SYSTEM_ERROR for both, so a tool can tell them from a failure.
//!
//! A POP group's queues also start over at the new offsets on the shards that own them,
//! with a reset record in the revive log, so the reset survives a restart; deliveries in
//! flight at the reset are void ([`crate::broker::pop::reset`]).
//!
//! The queues' offsets are searched on the shards that own them ([`crate::broker::admin::fan_out`]); the
//! shard the request reached commits them (the offset table is node-wide) only once every
//! shard has answered, so a reset that fails part-way changes no offset. The remark says
//! how many clients were told.

use std::net::SocketAddr;

use crate::remoting::codes::{request as request_code, response};
use crate::remoting::{ExtFields, FieldError, RemotingCommand};

use crate::broker::admin::admin_json::{offset_table, queue_key};
use crate::broker::admin::fan_out::{gather, Gathered, Rows};
use crate::broker::pop::state::QueueKey;
use crate::broker::{bad_header, naming::names, Broker};

struct ResetHeader<'a> {
    topic: &'a str,
    group: &'a str,
    timestamp: i64,
    force: bool,
    queue_id: i32,
    offset: Option<i64>,
}

fn decode(request: &RemotingCommand) -> Result<ResetHeader<'_>, FieldError> {
    Ok(ResetHeader {
        topic: request.get_str("topic")?,
        group: request.get_str("group")?,
        timestamp: request.get_i64("timestamp")?,
        force: request.get_bool("isForce")?,
        queue_id: request.opt_i32("queueId")?.unwrap_or(-1),
        offset: request.opt_i64("offset")?,
    })
}

pub async fn reset_offset(
    broker: &Broker,
    request: &RemotingCommand,
    peer: SocketAddr,
) -> RemotingCommand {
    let header = match decode(request) {
        Ok(header) => header,
        Err(error) => return bad_header(request, error),
    };
    let queues = match check_reset(broker, request, &header) {
        Ok(queues) => queues,
        Err(refused) => return *refused,
    };
    let local = match reset_local(broker, &header, queues) {
        Ok(local) => local,
        Err(why) => {
            return RemotingCommand::response_to(request, response::SYSTEM_ERROR, Some(why))
        }
    };
    if let Err(why) = start_pop_queues_over(broker, &header, &local).await {
        return RemotingCommand::response_to(
            request,
            response::SYSTEM_ERROR,
            Some(why.to_string()),
        );
    }
    let rows = match gather(broker, request, peer, 1, local).await {
        Ok(Gathered::Answer(answer)) => return answer,
        Ok(Gathered::All(rows)) => rows,
        Err(answer) => return answer,
    };
    // Only once every shard has answered: a reset that fails part-way changes nothing.
    for (queue_id, values) in &rows {
        broker
            .consumer_offsets
            .commit(header.group, header.topic, *queue_id, values[0]);
    }
    let body = reset_body(broker, header.topic, &rows);
    let told = tell_clients(broker, &header, &body);
    tracing::info!(
        group = %crate::remoting::log_safe::log_safe(header.group),
        topic = %crate::remoting::log_safe::log_safe(header.topic),
        timestamp = header.timestamp,
        force = header.force,
        queues = rows.len(),
        clients = told,
        "consumer offsets reset"
    );
    RemotingCommand::response_to(
        request,
        response::SUCCESS,
        Some(format!("reset {} queues; told {told} clients", rows.len())),
    )
    .with_body(body.into_bytes())
}

/// The refusals a reset gets before anything moves: bad names, a topic this broker does
/// not have, a queue it does not have, a group with neither offsets on the topic nor a
/// client online. The topic's read queues otherwise.
fn check_reset(
    broker: &Broker,
    request: &RemotingCommand,
    header: &ResetHeader<'_>,
) -> Result<i32, Box<RemotingCommand>> {
    if let Err(why) =
        names::validate_topic(header.topic).and_then(|()| names::validate_group(header.group))
    {
        return Err(Box::new(bad_header(request, why)));
    }
    let Some(config) = broker.topics.get(header.topic) else {
        return Err(Box::new(RemotingCommand::response_to(
            request,
            response::TOPIC_NOT_EXIST,
            Some(format!(
                "[reset-offset] reset offset failed, no topic in this broker. topic={}",
                header.topic
            )),
        )));
    };
    let queues = config.read_queue_nums as i32;
    if header.queue_id >= queues || header.queue_id < -1 {
        return Err(Box::new(bad_header(
            request,
            format!(
                "queueId {} is not a queue of {} ({queues} read queues)",
                header.queue_id, header.topic
            ),
        )));
    }
    let known = broker.groups.consumer_ids(header.group).is_some()
        || broker
            .consumer_offsets
            .topics_of(header.group)
            .iter()
            .any(|topic| topic == header.topic);
    if !known {
        return Err(Box::new(RemotingCommand::response_to(
            request,
            response::SUBSCRIPTION_GROUP_NOT_EXIST,
            Some(format!(
                "the consumer group <{}> has no offsets on topic {} and no client online",
                header.group, header.topic
            )),
        )));
    }
    Ok(queues)
}

/// A POP group's queues start over here, on their owners, before the commit: the reset
/// record makes the reset survive a restart (`pop_reset`). If another shard then fails
/// the request, these queues follow the unchanged committed offset again at their next
/// pop, as after any outside commit.
async fn start_pop_queues_over(
    broker: &Broker,
    header: &ResetHeader<'_>,
    local: &Rows,
) -> Result<(), crate::broker::pop::log::PopLogError> {
    for (queue_id, values) in local {
        let key = QueueKey::new(header.group, header.topic, *queue_id);
        crate::broker::pop::reset::outside_commit(broker, &key, values[0] as u64).await?;
    }
    Ok(())
}

/// Searches the new offsets of the queues this shard owns; the shard that received the
/// request commits them all once every shard has answered.
fn reset_local(broker: &Broker, header: &ResetHeader<'_>, queues: i32) -> Result<Rows, String> {
    let mut rows = Rows::new();
    let targets: Vec<i32> = match header.queue_id {
        -1 => (0..queues).collect(),
        one => vec![one],
    };
    for queue_id in targets {
        if broker.shard.owner(header.topic, queue_id) != broker.shard.id() {
            continue;
        }
        let (min, max) = (
            broker.store.min_offset(header.topic, queue_id),
            broker.store.max_offset(header.topic, queue_id),
        );
        let target = match (header.offset, header.timestamp) {
            (Some(offset), _) if header.queue_id >= 0 => offset.clamp(min as i64, max as i64),
            (_, -1) => max as i64,
            (_, timestamp) => broker
                .store
                .offset_by_timestamp(header.topic, queue_id, timestamp)
                .map_err(|error| error.to_string())? as i64,
        };
        let committed = broker
            .consumer_offsets
            .query(header.group, header.topic, queue_id);
        let offset = match committed {
            Some(committed) if !header.force && committed <= target => committed,
            _ => target,
        };
        assert!(
            (min as i64..=max as i64).contains(&offset) || Some(offset) == committed,
            "reset of {}/{queue_id} to {offset}, outside [{min}, {max}] and not the committed {committed:?}",
            header.topic
        );
        rows.insert(queue_id, vec![offset]);
    }
    Ok(rows)
}

fn reset_body(broker: &Broker, topic: &str, rows: &Rows) -> String {
    let entries = rows.iter().map(|(queue_id, values)| {
        (
            queue_key(&broker.identity.broker_name, topic, *queue_id),
            values[0].to_string(),
        )
    });
    format!("{{{}}}", offset_table(entries))
}

/// Sends RESET_CONSUMER_CLIENT_OFFSET to every live client of the group; how many it
/// reached.
fn tell_clients(broker: &Broker, header: &ResetHeader<'_>, body: &str) -> usize {
    let mut told = 0;
    for client in broker.groups.consumer_peers(header.group) {
        let mut fields = ExtFields::new();
        fields.insert("topic".into(), header.topic);
        fields.insert("group".into(), header.group);
        fields.insert("timestamp".into(), header.timestamp.to_string().as_str());
        fields.insert(
            "isForce".into(),
            if header.force { "true" } else { "false" },
        );
        let notice = RemotingCommand::request(request_code::RESET_CONSUMER_CLIENT_OFFSET, fields)
            .with_body(body.as_bytes().to_vec());
        if broker.links.send_oneway(client, notice) {
            told += 1;
        }
    }
    told
}
