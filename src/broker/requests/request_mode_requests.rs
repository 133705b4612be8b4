//! SET_MESSAGE_REQUEST_MODE (401): switches a consumer group on a topic between pull and
//! pop (reference part 2 §2.1), in the node's [`crate::broker::tables::request_modes`]
//! table. A body that does not parse, a mode other than PULL or POP, a `%RETRY%` topic or a
//! bad name is INVALID_PARAMETER; an unknown topic is TOPIC_NOT_EXIST; SUCCESS once the
//! file holds the change.
//!
//! GET_ALL_MESSAGE_REQUEST_MODE (402): the whole table as its file holds it (Java's
//! `MessageRequestModeSerializeWrapper`), what a slave copies
//! ([`crate::broker::tables::mirror`]).

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::pop::wire::MessageRequestMode;
use crate::broker::tables::request_modes::check;
use crate::broker::Broker;

/// GET_ALL_MESSAGE_REQUEST_MODE (402).
pub fn get_all(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    RemotingCommand::response_to(request, response::SUCCESS, None)
        .with_body(broker.request_modes.to_json())
}

/// SET_MESSAGE_REQUEST_MODE (401).
pub async fn set_message_request_mode(
    broker: &Broker,
    request: &RemotingCommand,
) -> RemotingCommand {
    let fail = |code, remark: String| RemotingCommand::response_to(request, code, Some(remark));
    let mode: MessageRequestMode = match serde_json::from_slice(&request.body) {
        Ok(mode) => mode,
        Err(error) => {
            return fail(
                response::INVALID_PARAMETER,
                format!("bad SET_MESSAGE_REQUEST_MODE body: {error}"),
            )
        }
    };
    if let Err(why) = check(&mode) {
        return fail(response::INVALID_PARAMETER, why.to_string());
    }
    if broker.topics.get(&mode.topic).is_none() {
        return fail(
            response::TOPIC_NOT_EXIST,
            format!("topic[{}] not exist", mode.topic),
        );
    }
    match broker.request_modes.set_written(mode).await {
        Ok(()) => RemotingCommand::response_to(request, response::SUCCESS, None),
        Err(failed) => fail(response::SYSTEM_ERROR, failed.to_string()),
    }
}
