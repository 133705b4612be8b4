//! VIEW_BROKER_STATS_DATA (315): one of Java's per-minute/hour/day stats items (puts per
//! topic, gets per group and topic, ...). `mqadmin statsAll` asks it for every topic and
//! group and prints 0 for an item it cannot get.
//!
//! Header `statsName` (`TOPIC_PUT_NUMS`, `GROUP_GET_NUMS`, ...) and `statsKey` (a topic, or
//! `topic@group`). ringmq keeps no such sliding-window items (its figures are the
//! Prometheus counters and GET_BROKER_RUNTIME_INFO), so every item is answered as Java
//! answers an item it does not hold: SYSTEM_ERROR, `The stats <NAME> <KEY> not exist`.

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::bad_header;

pub fn view_broker_stats_data(request: &RemotingCommand) -> RemotingCommand {
    let (name, key) = match (request.get_str("statsName"), request.get_str("statsKey")) {
        (Ok(name), Ok(key)) => (name, key),
        (Err(error), _) | (_, Err(error)) => return bad_header(request, error),
    };
    RemotingCommand::response_to(
        request,
        response::SYSTEM_ERROR,
        Some(format!("The stats <{name}> <{key}> not exist")),
    )
}
