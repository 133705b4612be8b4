//! GET_CONSUME_STATS (208), `mqadmin consumerProgress`: a group's progress on each queue
//! of its topics, and the lag it implies.
//!
//! Header `consumerGroup` and `topic` (empty or absent: every topic the group has
//! committed offsets on, as Java's `whichTopicByConsumer`). The answer is a
//! `ConsumeStats` in fastjson's shape ([`crate::broker::admin::admin_json`]):
//!
//! ```text
//! {"consumeTps":0.0,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:
//!   {"brokerOffset":10,"consumerOffset":4,"lastTimestamp":1700000000000,"pullOffset":4}}}
//! ```
//!
//! As in Java: the queues are `0..readQueueNums`; a missing committed offset counts as 0;
//! `lastTimestamp` is the store time of the message before the committed offset (0 if
//! there is none); a topic that no longer exists is left out, and so is one the group,
//! while online, does not subscribe to. An unknown group is an empty table (SUCCESS):
//! the tools say "not found" themselves. `pullOffset` is the committed offset (the node
//! does not track pulls apart from commits). `consumeTps` is Java's (`tpsGroupGetNums`):
//! the messages the group's pulls returned from the topics listed, per second over the
//! last minute ([`crate::metrics::rates`]), summed over the shards (0 for a pair past
//! `metrics_max_groups`).

use std::net::SocketAddr;

use crate::metrics::rates::java_double;
use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::admin::admin_json::{offset_table, queue_key};
use crate::broker::admin::fan_out::{gather, Gathered, Rows};
use crate::broker::{bad_header, naming::names, Broker};

/// broker offset, consumer offset, last timestamp, and the shard's get rate of the group
/// on the topic × 1000 on the first queue it owns (0 on the others), so the sum over the
/// rows is the pair's.
const WIDTH: usize = 4;

pub async fn consume_stats(
    broker: &Broker,
    request: &RemotingCommand,
    peer: SocketAddr,
) -> RemotingCommand {
    let group = match request.get_str("consumerGroup") {
        Ok(group) => group,
        Err(error) => return bad_header(request, error),
    };
    if let Err(why) = names::validate_group(group) {
        return bad_header(request, why);
    }
    let named = request.opt_str("topic").filter(|topic| !topic.is_empty());
    if let Some(Err(why)) = named.map(names::validate_topic) {
        return bad_header(request, why);
    }
    if request.opt_str(crate::broker::admin::fan_out::SHARD_ONLY) == Some("true") {
        // Another shard's copy for one topic: always answer with rows (maybe none), never
        // skip the topic on this shard's own view of the tables, which may differ.
        let topic = named.unwrap_or_default();
        let queues = broker.topics.get(topic).map_or(0, |c| c.read_queue_nums);
        let local = match local_rows(broker, group, topic, queues) {
            Ok(local) => local,
            Err(why) => {
                return RemotingCommand::response_to(request, response::SYSTEM_ERROR, Some(why))
            }
        };
        return crate::broker::admin::fan_out::shard_answer(request, local);
    }
    let topics = match named {
        Some(topic) => vec![topic.to_owned()],
        None => broker.consumer_offsets.topics_of(group),
    };
    let online = broker.groups.consumer_ids(group).is_some();
    let mut entries = Vec::new();
    let mut consume_tps = 0.0;
    for topic in topics {
        let Some(config) = broker.topics.get(&topic) else {
            continue;
        };
        if online && broker.groups.subscription(group, &topic).is_none() {
            continue;
        }
        let mut per_topic = request.clone();
        per_topic.put_ext("topic", &topic);
        let local = match local_rows(broker, group, &topic, config.read_queue_nums) {
            Ok(local) => local,
            Err(why) => {
                return RemotingCommand::response_to(request, response::SYSTEM_ERROR, Some(why))
            }
        };
        let rows = match gather(broker, &per_topic, peer, WIDTH, local).await {
            Ok(Gathered::Answer(answer)) => return answer,
            Ok(Gathered::All(rows)) => rows,
            Err(answer) => return answer,
        };
        consume_tps += rows.values().map(|values| values[3]).sum::<i64>() as f64 / 1000.0;
        for (queue_id, values) in rows {
            let [broker_offset, consumer_offset, last] = [values[0], values[1], values[2]];
            entries.push((
                queue_key(&broker.identity.broker_name, &topic, queue_id),
                format!(
                    r#"{{"brokerOffset":{broker_offset},"consumerOffset":{consumer_offset},"lastTimestamp":{last},"pullOffset":{consumer_offset}}}"#
                ),
            ));
        }
    }
    let body = format!(
        "{{\"consumeTps\":{},{}}}",
        java_double(consume_tps),
        offset_table(entries)
    );
    RemotingCommand::response_to(request, response::SUCCESS, None).with_body(body.into_bytes())
}

/// This shard's rows for the queues of `topic` it owns.
fn local_rows(broker: &Broker, group: &str, topic: &str, queues: u32) -> Result<Rows, String> {
    let mut rows = Rows::new();
    for queue_id in 0..queues as i32 {
        if broker.shard.owner(topic, queue_id) != broker.shard.id() {
            continue;
        }
        let broker_offset = broker.store.max_offset(topic, queue_id) as i64;
        let consumer_offset = broker
            .consumer_offsets
            .query(group, topic, queue_id)
            .unwrap_or(0)
            .max(0);
        let last = match consumer_offset.checked_sub(1).filter(|o| *o >= 0) {
            Some(offset) => broker
                .store
                .message_store_time(topic, queue_id, offset as u64)
                .map_err(|error| error.to_string())?
                .unwrap_or(0),
            None => 0,
        };
        let tps = if rows.is_empty() {
            (broker.metrics.group_get_tps(group, topic) * 1000.0).round() as i64
        } else {
            0
        };
        rows.insert(queue_id, vec![broker_offset, consumer_offset, last, tps]);
    }
    Ok(rows)
}
