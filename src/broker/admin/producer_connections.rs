//! GET_PRODUCER_CONNECTION_LIST (204), `mqadmin producerConnection`: the clients of a
//! producer group right now, as their heartbeats' `producerDataSet` registered them.
//!
//! Header `producerGroup` (mqadmin also sends `topic`, which Java's broker ignores, and so
//! does this one). The answer is a `ProducerConnection`:
//!
//! ```text
//! {"connectionSet":[{"clientAddr":"127.0.0.1:50312","clientId":"10.0.0.5@1",
//!   "language":"JAVA","version":499}]}
//! ```
//!
//! A group with no live client is SYSTEM_ERROR with Java's remark, `the producer
//! group[G] not exist` (Java keeps no other kind of producer group either).

use serde_json::{json, Value};

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::admin::consumer_connections::client_json;
use crate::broker::{bad_header, naming::names, Broker};

pub fn producer_connections(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let group = match request.get_str("producerGroup") {
        Ok(group) => group,
        Err(error) => return bad_header(request, error),
    };
    if let Err(why) = names::validate_group(group) {
        return bad_header(request, why);
    }
    match broker.groups.producer_connections(group) {
        Some(clients) => {
            let set: Vec<Value> = clients.iter().map(client_json).collect();
            RemotingCommand::response_to(request, response::SUCCESS, None)
                .with_body(json!({ "connectionSet": set }).to_string().into_bytes())
        }
        None => RemotingCommand::response_to(
            request,
            response::SYSTEM_ERROR,
            Some(format!("the producer group[{group}] not exist")),
        ),
    }
}
