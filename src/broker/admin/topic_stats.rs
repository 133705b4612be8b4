//! GET_TOPIC_STATS_INFO (202), `mqadmin topicStatus`: each write queue's minimum and
//! maximum offset and the store time of its newest message.
//!
//! Header `topic`. The answer is a `TopicStatsTable` in fastjson's shape
//! ([`crate::broker::admin::admin_json`]):
//!
//! ```text
//! {"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:
//!   {"lastUpdateTimestamp":1700000000000,"maxOffset":5,"minOffset":0}},"topicPutTps":0.0}
//! ```
//!
//! `topicPutTps` (5.x; the Rust client requires it) is Java's: the messages stored in the
//! topic per second over the last minute ([`crate::metrics::rates`]), summed over the
//! shards that hold its queues (0 for a topic past `metrics_max_topics`).
//!
//! As in Java, the queues are `0..writeQueueNums`, an unknown topic is TOPIC_NOT_EXIST
//! (17), and an empty queue's `lastUpdateTimestamp` is 0. The queues live on the shards
//! that own them; [`crate::broker::admin::fan_out`] collects them.

use std::net::SocketAddr;

use crate::metrics::rates::java_double;
use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::admin::admin_json::{offset_table, queue_key};
use crate::broker::admin::fan_out::{gather, Gathered, Rows};
use crate::broker::{bad_header, naming::names, Broker};

/// min, max, last update time, and the shard's `topicPutTps` × 1000 on the first queue
/// it owns (0 on the others), so the sum over the rows is the topic's.
const WIDTH: usize = 4;

pub async fn topic_stats(
    broker: &Broker,
    request: &RemotingCommand,
    peer: SocketAddr,
) -> RemotingCommand {
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
            Some(format!("topic[{topic}] not exist")),
        );
    };
    let mut local = Rows::new();
    for queue_id in 0..config.write_queue_nums as i32 {
        if broker.shard.owner(topic, queue_id) != broker.shard.id() {
            continue;
        }
        let (min, max) = (
            broker.store.min_offset(topic, queue_id),
            broker.store.max_offset(topic, queue_id),
        );
        let last = match max.checked_sub(1) {
            Some(newest) => match broker.store.message_store_time(topic, queue_id, newest) {
                Ok(time) => time.unwrap_or(0),
                Err(error) => {
                    return RemotingCommand::response_to(
                        request,
                        response::SYSTEM_ERROR,
                        Some(error.to_string()),
                    )
                }
            },
            None => 0,
        };
        let tps = if local.is_empty() {
            (broker.metrics.topic_put_tps(topic) * 1000.0).round() as i64
        } else {
            0
        };
        local.insert(queue_id, vec![min as i64, max as i64, last, tps]);
    }
    let rows = match gather(broker, request, peer, WIDTH, local).await {
        Ok(Gathered::Answer(answer)) => return answer,
        Ok(Gathered::All(rows)) => rows,
        Err(answer) => return answer,
    };
    let put_tps = rows.values().map(|values| values[3]).sum::<i64>() as f64 / 1000.0;
    let entries = rows.iter().map(|(queue_id, values)| {
        let [min, max, last] = [values[0], values[1], values[2]];
        (
            queue_key(&broker.identity.broker_name, topic, *queue_id),
            format!(r#"{{"lastUpdateTimestamp":{last},"maxOffset":{max},"minOffset":{min}}}"#),
        )
    });
    let body = format!(
        "{{{},\"topicPutTps\":{}}}",
        offset_table(entries),
        java_double(put_tps)
    );
    RemotingCommand::response_to(request, response::SUCCESS, None).with_body(body.into_bytes())
}
