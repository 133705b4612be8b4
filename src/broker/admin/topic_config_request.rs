//! GET_TOPIC_CONFIG (351): one topic's configuration. `mqadmin topicStatus`,
//! `consumerProgress` and `cloneGroupOffset` ask for it first (`examineTopicConfig`).
//!
//! Header `topic` (and `lo`, a logic-queue flag of static topics, which ringmq has none
//! of). The answer is Java's `TopicConfigAndQueueMapping`: the `TopicConfig` fields in
//! fastjson's (alphabetical) order, with no `mappingDetail` (Java leaves that null, so
//! fastjson omits it, for a topic that is not static):
//!
//! ```text
//! {"attributes":{},"order":false,"perm":6,"readQueueNums":8,"topicFilterType":"SINGLE_TAG",
//!  "topicName":"T","topicSysFlag":0,"writeQueueNums":8}
//! ```
//!
//! An unknown topic is TOPIC_NOT_EXIST (17) with Java's remark,
//! `No topic in this broker. topic: T`; it is never auto-created here.

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::{bad_header, naming::names, Broker};

pub fn get_topic_config(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let topic = match request.get_str("topic") {
        Ok(topic) => topic,
        Err(error) => return bad_header(request, error),
    };
    if let Err(why) = names::validate_topic(topic) {
        return bad_header(request, why);
    }
    let Some(config) = broker.topics.get(topic) else {
        return RemotingCommand::response_to(
            request,
            response::TOPIC_NOT_EXIST,
            Some(format!("No topic in this broker. topic: {topic}")),
        );
    };
    // serde_json's maps are sorted, so the fields come out in fastjson's order.
    let body = serde_json::to_value(&config)
        .expect("a TopicConfig always serializes")
        .to_string();
    RemotingCommand::response_to(request, response::SUCCESS, None).with_body(body.into_bytes())
}
