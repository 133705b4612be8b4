//! GET_BROKER_CONSUME_STATS (317), `mqadmin brokerConsumeStats`: the progress of every
//! subscription group on every topic it has committed offsets on, and the broker's total
//! lag.
//!
//! Header `isOrder` (only ordered topics when true). The answer is Java's
//! `ConsumeStatsList`; each `ConsumeStats` is GET_CONSUME_STATS's answer for that group
//! and topic ([`crate::broker::admin::consume_stats`], which also asks the other shards), so the two
//! requests never disagree:
//!
//! ```text
//! {"brokerAddr":"127.0.0.1:10911",
//!  "consumeStatsList":[{"G":[{"consumeTps":0.0,"offsetTable":{{"brokerName":..}:{..}}}]}],
//!  "totalDiff":12,"totalInflightDiff":0}
//! ```
//!
//! As in Java: the groups are the subscription groups (here in name order), each listed
//! even with no topic; a topic that no longer exists, or that the group while online does
//! not subscribe to, is left out; `totalDiff` sums broker offset minus consumer offset over
//! every queue listed. `totalInflightDiff` is 0: pulls are not tracked apart from commits.

use std::net::SocketAddr;

use crate::remoting::codes::{request as request_code, response};
use crate::remoting::{ExtFields, RemotingCommand};

use crate::broker::admin::admin_json::quoted;
use crate::broker::{admin::consume_stats, bad_header, Broker};

pub async fn broker_consume_stats(
    broker: &Broker,
    request: &RemotingCommand,
    peer: SocketAddr,
) -> RemotingCommand {
    let only_ordered = match request.opt_bool("isOrder") {
        Ok(flag) => flag.unwrap_or(false),
        Err(error) => return bad_header(request, error),
    };
    let mut groups = Vec::new();
    let mut total_diff: i64 = 0;
    let mut names: Vec<String> = broker
        .subscription_groups
        .all()
        .into_iter()
        .map(|config| config.group_name)
        .collect();
    names.sort();
    for group in names {
        let mut stats = Vec::new();
        for topic in broker.consumer_offsets.topics_of(&group) {
            let Some(config) = broker.topics.get(&topic) else {
                continue;
            };
            if only_ordered && !config.order {
                continue;
            }
            let mut per_topic =
                RemotingCommand::request(request_code::GET_CONSUME_STATS, ExtFields::new());
            per_topic.opaque = request.opaque;
            per_topic.put_ext("consumerGroup", &group);
            per_topic.put_ext("topic", &topic);
            let answer = Box::pin(consume_stats::consume_stats(broker, &per_topic, peer)).await;
            if answer.code != response::SUCCESS {
                return RemotingCommand::response_to(
                    request,
                    response::SYSTEM_ERROR,
                    Some(format!(
                        "consume stats of group {group} on topic {topic}: {}",
                        answer.remark.unwrap_or_default()
                    )),
                );
            }
            let (diff, queues) = match diff_of(&answer.body) {
                Ok(found) => found,
                Err(why) => {
                    return RemotingCommand::response_to(request, response::SYSTEM_ERROR, Some(why))
                }
            };
            if queues == 0 {
                // Left out by GET_CONSUME_STATS's rules (not subscribed while online).
                continue;
            }
            total_diff += diff;
            stats.push(String::from_utf8_lossy(&answer.body).into_owned());
        }
        groups.push(format!("{{{}:[{}]}}", quoted(&group), stats.join(",")));
    }
    let body = format!(
        r#"{{"brokerAddr":{},"consumeStatsList":[{}],"totalDiff":{total_diff},"totalInflightDiff":0}}"#,
        quoted(&broker.identity.store_host.to_string()),
        groups.join(",")
    );
    RemotingCommand::response_to(request, response::SUCCESS, None).with_body(body.into_bytes())
}

/// Broker offset minus consumer offset summed over a `ConsumeStats`'s queues, and how
/// many queues it lists.
fn diff_of(body: &[u8]) -> Result<(i64, usize), String> {
    let parsed = crate::remoting::fastjson::parse(body).map_err(|error| error.to_string())?;
    let Some(table) = parsed
        .get("offsetTable")
        .and_then(|table| table.as_object())
    else {
        return Err("a ConsumeStats without offsetTable".into());
    };
    let mut diff = 0;
    for wrapper in table.values() {
        let field = |name: &str| wrapper.get(name).and_then(|v| v.as_i64()).unwrap_or(0);
        diff += field("brokerOffset") - field("consumerOffset");
    }
    Ok((diff, table.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_diff_sums_every_queue_of_a_fastjson_table() {
        let body = br#"{"consumeTps":0.0,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"brokerOffset":10,"consumerOffset":4,"lastTimestamp":0,"pullOffset":4},{"brokerName":"b","queueId":1,"topic":"T"}:{"brokerOffset":3,"consumerOffset":3,"lastTimestamp":0,"pullOffset":3}}}"#;
        assert_eq!(diff_of(body), Ok((6, 2)));
        assert_eq!(
            diff_of(br#"{"consumeTps":0.0,"offsetTable":{}}"#),
            Ok((0, 0))
        );
    }
}
