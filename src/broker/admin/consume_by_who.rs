//! QUERY_TOPIC_CONSUME_BY_WHO (300): the consumer groups of a topic. `mqadmin
//! queryMsgById` and `queryMsgByOffset` ask it after printing a message, to say for each
//! group whether it consumed the message (`messageTrackDetail`).
//!
//! Header `topic`. As Java's `AdminBrokerProcessor.queryTopicConsumeByWho`: the groups
//! whose live clients subscribe to the topic, plus the groups with committed offsets on
//! it, as a `GroupList`, `{"groupList":["G1","G2"]}` (here in name order). An unknown
//! topic is an empty list, SUCCESS, as in Java.

use std::collections::BTreeSet;

use serde_json::json;

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::{bad_header, naming::names, Broker};

pub fn query_topic_consume_by_who(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let topic = match request.get_str("topic") {
        Ok(topic) => topic,
        Err(error) => return bad_header(request, error),
    };
    if let Err(why) = names::validate_topic(topic) {
        return bad_header(request, why);
    }
    let mut groups: BTreeSet<String> = broker
        .groups
        .consumer_groups()
        .into_iter()
        .filter(|group| broker.groups.subscription(group, topic).is_some())
        .collect();
    groups.extend(broker.consumer_offsets.groups_of(topic));
    RemotingCommand::response_to(request, response::SUCCESS, None)
        .with_body(json!({ "groupList": groups }).to_string().into_bytes())
}
