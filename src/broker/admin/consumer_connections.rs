//! GET_CONSUMER_CONNECTION_LIST (203), `mqadmin consumerConnection`: who is in a consumer
//! group right now, what it subscribes to and how it consumes.
//!
//! It takes header `consumerGroup` and answers a `ConsumerConnection`:
//!
//! ```text
//! {"connectionSet":[{"clientAddr":"127.0.0.1:50312","clientId":"10.0.0.5@1",
//!   "language":"RUST","version":0}],
//!  "consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY",
//!  "messageModel":"CLUSTERING",
//!  "subscriptionTable":{"T":{"classFilterMode":false,"codeSet":[],"expressionType":"TAG",
//!    "subString":"*","subVersion":1700000000000,"tagsSet":[],"topic":"T"}}}
//! ```
//!
//! A group with no live client is CONSUMER_NOT_ONLINE (206) with Java's remark. A setting
//! the group's heartbeat did not give is left out (the clients read it as absent), and a
//! client whose header named no language is `OTHER`.

use serde_json::{json, Map, Value};

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::state::groups::{ClientConnection, GroupConnections};
use crate::broker::{bad_header, naming::names, Broker};

pub fn consumer_connections(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let group = match request.get_str("consumerGroup") {
        Ok(group) => group,
        Err(error) => return bad_header(request, error),
    };
    if let Err(why) = names::validate_group(group) {
        return bad_header(request, why);
    }
    match broker.groups.connections(group) {
        Some(connections) => RemotingCommand::response_to(request, response::SUCCESS, None)
            .with_body(connection_json(&connections).to_string().into_bytes()),
        None => RemotingCommand::response_to(
            request,
            response::CONSUMER_NOT_ONLINE,
            Some(format!("the consumer group[{group}] not online")),
        ),
    }
}

/// One client as a `Connection` of Java's connection sets (consumer and producer alike).
pub(crate) fn client_json(client: &ClientConnection) -> Value {
    let language = match client.language.as_str() {
        "" => "OTHER",
        named => named,
    };
    json!({
        "clientAddr": client.peer.to_string(),
        "clientId": client.client_id,
        "language": language,
        "version": client.version,
    })
}

fn connection_json(connections: &GroupConnections) -> Value {
    let clients: Vec<Value> = connections.clients.iter().map(client_json).collect();
    let mut subscriptions = Map::new();
    for sub in &connections.subscriptions {
        subscriptions.insert(
            sub.topic.clone(),
            json!({
                "classFilterMode": false,
                "codeSet": sub.code_set,
                "expressionType": sub.expression_type.as_deref().unwrap_or("TAG"),
                "subString": sub.sub_string,
                "subVersion": sub.sub_version,
                "tagsSet": sub.tags_set,
                "topic": sub.topic,
            }),
        );
    }
    let mut body = Map::new();
    body.insert("connectionSet".into(), Value::Array(clients));
    body.insert("subscriptionTable".into(), Value::Object(subscriptions));
    for (field, value) in [
        ("consumeType", &connections.consume_type),
        ("messageModel", &connections.message_model),
        ("consumeFromWhere", &connections.consume_from_where),
    ] {
        if !value.is_empty() {
            body.insert(field.into(), Value::from(value.as_str()));
        }
    }
    Value::Object(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::requests::consumers::SubscriptionData;

    #[test]
    fn a_connection_lists_clients_subscriptions_and_only_the_settings_given() {
        let connections = GroupConnections {
            clients: vec![ClientConnection {
                client_id: "c@1".into(),
                peer: "127.0.0.1:4000".parse().unwrap(),
                language: String::new(),
                version: 7,
            }],
            subscriptions: vec![SubscriptionData {
                topic: "T".into(),
                sub_string: "a || b".into(),
                tags_set: vec!["a".into(), "b".into()],
                code_set: vec![97, 98],
                sub_version: 5,
                expression_type: None,
            }],
            consume_type: "CONSUME_PASSIVELY".into(),
            message_model: String::new(),
            consume_from_where: "CONSUME_FROM_LAST_OFFSET".into(),
        };
        let body = connection_json(&connections);
        assert_eq!(body["connectionSet"][0]["clientAddr"], "127.0.0.1:4000");
        assert_eq!(body["connectionSet"][0]["language"], "OTHER");
        assert_eq!(body["connectionSet"][0]["version"], 7);
        assert_eq!(body["subscriptionTable"]["T"]["subString"], "a || b");
        assert_eq!(body["subscriptionTable"]["T"]["expressionType"], "TAG");
        assert_eq!(body["consumeType"], "CONSUME_PASSIVELY");
        assert!(body.get("messageModel").is_none(), "{body}");
    }
}
