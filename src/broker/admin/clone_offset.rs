//! CLONE_GROUP_OFFSET (314), `mqadmin cloneGroupOffset`: gives a consumer group the
//! committed offsets of another on a topic, so it starts where the other stands.
//!
//! Header `srcGroup`, `destGroup`, `topic` (blank: every topic `srcGroup` has committed
//! offsets on) and `offline`. As Java's `AdminBrokerProcessor.cloneGroupOffset`: a topic
//! the broker does not have is skipped; unless `offline`, so is a topic the source group,
//! while it has live clients, does not subscribe to; the destination's offsets on a topic
//! are replaced by a copy of the source's. Always SUCCESS (Java's too: what was skipped is
//! only logged). The offsets reach `config/consumerOffset.json` with the next flush, as
//! committed offsets do.

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::{bad_header, naming::names, Broker};

pub fn clone_group_offset(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let header = (|| {
        Ok::<_, crate::remoting::FieldError>((
            request.get_str("srcGroup")?,
            request.get_str("destGroup")?,
            request.opt_str("topic").unwrap_or("").trim(),
            request.opt_bool("offline")?.unwrap_or(false),
        ))
    })();
    let (src, dest, topic, offline) = match header {
        Ok(header) => header,
        Err(error) => return bad_header(request, error),
    };
    if let Err(why) = names::validate_group(src).and_then(|()| names::validate_group(dest)) {
        return bad_header(request, why);
    }
    let topics = if topic.is_empty() {
        broker.consumer_offsets.topics_of(src)
    } else {
        if let Err(why) = names::validate_topic(topic) {
            return bad_header(request, why);
        }
        vec![topic.to_owned()]
    };
    let online = broker.groups.consumer_ids(src).is_some();
    for topic in topics {
        if broker.topics.get(&topic).is_none() {
            tracing::warn!(topic = %crate::remoting::log_safe::log_safe(&topic), "cloneGroupOffset: no such topic");
            continue;
        }
        if !offline && online && broker.groups.subscription(src, &topic).is_none() {
            continue;
        }
        broker.consumer_offsets.clone_offsets(src, dest, &topic);
    }
    RemotingCommand::response_to(request, response::SUCCESS, None)
}
