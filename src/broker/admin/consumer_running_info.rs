//! GET_CONSUMER_RUNNING_INFO (307), `mqadmin consumerStatus`: a request relayed to a
//! consumer and its answer relayed back, over [`crate::broker::state::client_calls`].
//!
//! As Java's `AdminBrokerProcessor.callConsumer`: the broker finds the client by group and
//! client id, sends it a GET_CONSUMER_RUNNING_INFO request with the admin's header fields
//! and body over the client's own connection, waits up to `clientCallTimeout` (Java: 10 s)
//! and relays the client's answer (code, remark, header fields, body: a
//! `ConsumerRunningInfo` the client wrote) as the answer to the admin. Failures, with Java's
//! codes and remarks:
//! - the client is not in the group: SYSTEM_ERROR, `The Consumer <G> <C> not online`;
//! - no answer in time: CONSUME_MSG_TIMEOUT (207), `consumer <G> <C> Timeout: ...`;
//! - the connection is gone or not reading: SYSTEM_ERROR, `invoke consumer <G> <C>
//!   Exception: ...`.

use crate::remoting::codes::{request as request_code, response};
use crate::remoting::RemotingCommand;

use crate::broker::naming::names;
use crate::broker::state::client_calls::CallError;
use crate::broker::{bad_header, Broker};

/// Java's `ResponseCode.CONSUME_MSG_TIMEOUT`: a client did not answer a call in time.
pub const CONSUME_MSG_TIMEOUT: i32 = 207;

/// GET_CONSUMER_RUNNING_INFO (307): relayed to the client (see the module docs).
pub async fn consumer_running_info(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let (group, client_id) = match (
        request.get_str("consumerGroup"),
        request.get_str("clientId"),
    ) {
        (Ok(group), Ok(client_id)) => (group, client_id),
        (Err(error), _) | (_, Err(error)) => return bad_header(request, error),
    };
    if let Err(why) = names::validate_group(group) {
        return bad_header(request, why);
    }
    let Some(client) = broker.groups.consumer_client(group, client_id) else {
        return RemotingCommand::response_to(
            request,
            response::SYSTEM_ERROR,
            Some(format!("The Consumer <{group}> <{client_id}> not online")),
        );
    };
    let mut call = RemotingCommand::request(
        request_code::GET_CONSUMER_RUNNING_INFO,
        request.ext_fields.clone(),
    );
    call.body = request.body.clone();
    let outcome = broker
        .links
        .call(client.peer, call, broker.config.client_call_timeout)
        .await;
    match outcome {
        Ok(answer) => {
            let mut relayed = RemotingCommand::response_to(request, answer.code, answer.remark);
            relayed.ext_fields = answer.ext_fields;
            relayed.with_body(answer.body)
        }
        Err(CallError::Timeout) => RemotingCommand::response_to(
            request,
            CONSUME_MSG_TIMEOUT,
            Some(format!(
                "consumer <{group}> <{client_id}> Timeout: no answer from {} within {} ms",
                client.peer,
                broker.config.client_call_timeout.as_millis()
            )),
        ),
        Err(other) => RemotingCommand::response_to(
            request,
            response::SYSTEM_ERROR,
            Some(format!(
                "invoke consumer <{group}> <{client_id}> Exception: {}",
                match other {
                    CallError::NotSent(why) => why,
                    _ => "the connection closed before the consumer answered",
                }
            )),
        ),
    }
}
