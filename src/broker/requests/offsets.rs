//! Queue offset queries (reference §9.6): GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
//! SEARCH_OFFSET_BY_TIMESTAMP (29) and GET_EARLIEST_MSG_STORETIME (32).
//!
//! Invariants: the topic is checked by [`names`] (an illegal one is a bad header);
//! SUCCESS answers always carry their one header field (`offset`, or `timestamp` for 32); an unknown queue answers 0 offsets and timestamp -1, as Java does
//! for a queue it has no ConsumeQueue for. `committed` (30) is accepted and ignored: only
//! durable messages are visible here anyway (D7). `boundaryType=upper` (29) is not
//! implemented yet and is refused with INVALID_PARAMETER rather than answered wrongly.

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::{bad_header, naming::names, topic_and_queue, Broker};

/// `topic` and `queueId`, the topic checked by the rules every request applies
/// ([`names::validate_topic`]); the error is what to name in the refusal.
fn named_queue(request: &RemotingCommand) -> Result<(&str, i32), HeaderError> {
    let (topic, queue_id) = topic_and_queue(request)?;
    names::validate_topic(topic)?;
    Ok((topic, queue_id))
}

/// Why an offset query's header is refused: a missing or malformed field, or a topic the
/// rules refuse. Answered as a bad header naming it.
#[derive(Debug, thiserror::Error)]
enum HeaderError {
    #[error(transparent)]
    Field(#[from] crate::remoting::FieldError),
    #[error(transparent)]
    Name(#[from] names::NameError),
}

fn offset_response(
    request: &RemotingCommand,
    field: &str,
    value: impl std::fmt::Display,
) -> RemotingCommand {
    let mut answer = RemotingCommand::response_to(request, response::SUCCESS, None);
    answer.put_ext(field, value);
    answer
}

fn store_error(request: &RemotingCommand, error: crate::store::StoreError) -> RemotingCommand {
    RemotingCommand::response_to(request, response::SYSTEM_ERROR, Some(error.to_string()))
}

pub fn max_offset(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    match named_queue(request) {
        Ok((topic, queue_id)) => {
            offset_response(request, "offset", broker.store.max_offset(topic, queue_id))
        }
        Err(error) => bad_header(request, error),
    }
}

pub fn min_offset(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    match named_queue(request) {
        Ok((topic, queue_id)) => {
            offset_response(request, "offset", broker.store.min_offset(topic, queue_id))
        }
        Err(error) => bad_header(request, error),
    }
}

pub fn search_by_timestamp(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let fields = named_queue(request).and_then(|(topic, queue_id)| {
        let timestamp = request.get_i64("timestamp")?;
        Ok((topic, queue_id, timestamp))
    });
    let (topic, queue_id, timestamp) = match fields {
        Ok(fields) => fields,
        Err(error) => return bad_header(request, error),
    };
    match request.opt_str("boundaryType") {
        None => {}
        Some(boundary) if boundary.eq_ignore_ascii_case("lower") => {}
        Some(other) => {
            return RemotingCommand::response_to(
                request,
                response::INVALID_PARAMETER,
                Some(format!("boundaryType {other} is not supported; only lower")),
            )
        }
    }
    match broker.store.offset_by_timestamp(topic, queue_id, timestamp) {
        Ok(offset) => offset_response(request, "offset", offset),
        Err(error) => store_error(request, error),
    }
}

pub fn earliest_store_time(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let (topic, queue_id) = match named_queue(request) {
        Ok(fields) => fields,
        Err(error) => return bad_header(request, error),
    };
    match broker.store.earliest_store_time(topic, queue_id) {
        Ok(time) => offset_response(request, "timestamp", time.unwrap_or(-1)),
        Err(error) => store_error(request, error),
    }
}
