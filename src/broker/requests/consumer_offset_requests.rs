//! UPDATE_CONSUMER_OFFSET (15), QUERY_CONSUMER_OFFSET (14) and GET_ALL_CONSUMER_OFFSET
//! (43) (reference §9.4, §9.5), and [`check_target`], the one check for every request that
//! names a committed offset (the first two and a pull's `commitOffset`). The table they read and write is
//! [`crate::broker::tables::consumer_offsets`].
//!
//! Invariants: a bad header is a bad-header answer; a group, topic or queue id the send
//! rules refuse is INVALID_PARAMETER naming why; a negative `commitOffset` is refused.

use crate::remoting::codes::response;
use crate::remoting::{FieldError, RemotingCommand};

use crate::broker::naming::names::{self, NameError};
use crate::broker::{bad_header, Broker};

struct OffsetHeader<'a> {
    group: &'a str,
    topic: &'a str,
    queue_id: i32,
}

fn offset_header(request: &RemotingCommand) -> Result<OffsetHeader<'_>, FieldError> {
    Ok(OffsetHeader {
        group: request.get_str("consumerGroup")?,
        topic: request.get_str("topic")?,
        queue_id: request.get_i32("queueId")?,
    })
}

/// The one check for every request that names a committed offset (UPDATE, QUERY and a
/// pull's `commitOffset`): the names by the send rules, the queue id within the topic's
/// queues ([`names::validate_group_topic_queue`]). The error is the reason.
pub fn check_target(
    broker: &Broker,
    group: &str,
    topic: &str,
    queue_id: i32,
) -> Result<(), NameError> {
    names::validate_group_topic_queue(group, topic, broker.topics().get(topic).as_ref(), queue_id)
}

/// [`check_target`] as the refusal UPDATE and QUERY answer: INVALID_PARAMETER.
fn check_header(
    broker: &Broker,
    request: &RemotingCommand,
    header: &OffsetHeader<'_>,
) -> Option<RemotingCommand> {
    check_target(broker, header.group, header.topic, header.queue_id)
        .err()
        .map(|why| {
            RemotingCommand::response_to(
                request,
                response::INVALID_PARAMETER,
                Some(why.to_string()),
            )
        })
}

/// UPDATE_CONSUMER_OFFSET (15).
/// GET_ALL_CONSUMER_OFFSET (43): the node's whole offset table as its file holds it
/// (Java's `ConsumerOffsetSerializeWrapper`), what a slave copies
/// ([`crate::broker::tables::mirror`]); commits not yet written are included, as Java
/// answers from memory too.
pub fn get_all(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    RemotingCommand::response_to(request, response::SUCCESS, None)
        .with_body(broker.consumer_offsets.to_json())
}

pub fn update(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let (header, offset) =
        match offset_header(request).and_then(|h| Ok((h, request.get_i64("commitOffset")?))) {
            Ok(fields) => fields,
            Err(error) => return bad_header(request, error),
        };
    if let Some(refusal) = check_header(broker, request, &header) {
        return refusal;
    }
    if offset < 0 {
        return RemotingCommand::response_to(
            request,
            response::INVALID_PARAMETER,
            Some(format!("commitOffset {offset} is negative")),
        );
    }
    broker
        .consumer_offsets
        .commit(header.group, header.topic, header.queue_id, offset);
    RemotingCommand::response_to(request, response::SUCCESS, None)
}

/// QUERY_CONSUMER_OFFSET (14).
pub fn query(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    // Absent means true, as Java reads it: only an explicit `false` turns the zero off.
    let (header, zero_if_not_found) = match offset_header(request)
        .and_then(|h| Ok((h, request.opt_bool("setZeroIfNotFound")?.unwrap_or(true))))
    {
        Ok(fields) => fields,
        Err(error) => return bad_header(request, error),
    };
    if let Some(refusal) = check_header(broker, request, &header) {
        return refusal;
    }
    let found = broker
        .consumer_offsets
        .query(header.group, header.topic, header.queue_id)
        .or_else(|| {
            // §9.5: a group without an offset starts at 0 on a queue that still starts at 0
            // with a first message in memory, so a new group on a young topic gets what was
            // sent before it came, whatever its consumeFromWhere. A store that cannot read
            // the queue answers "not found", as Java does for a queue it cannot read.
            (zero_if_not_found
                && broker
                    .store
                    .starts_in_memory(header.topic, header.queue_id)
                    .unwrap_or(false))
            .then_some(0)
        });
    match found {
        Some(offset) => {
            let mut answer = RemotingCommand::response_to(request, response::SUCCESS, None);
            answer.put_ext("offset", offset);
            answer
        }
        None => RemotingCommand::response_to(
            request,
            response::QUERY_NOT_FOUND,
            Some("Not found, maybe this group consumer boot first".into()),
        ),
    }
}
