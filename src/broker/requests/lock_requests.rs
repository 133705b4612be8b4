//! LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42): orderly consumers lock the queues they
//! consume before they pull (reference §9.11). The table is [`crate::broker::state::queue_locks`].
//!
//! Both take the body
//! `{"consumerGroup":"g","clientId":"c","onlyThisBroker":false,"mqSet":[{"brokerName":"b","queueId":0,"topic":"T"}]}`.
//! LOCK answers `{"lockOKMQSet":[…]}`, the queues the client holds now; UNLOCK answers
//! SUCCESS with no body.
//!
//! A queue is locked only if it is this node's: its `brokerName` is this broker's, its
//! topic exists and its queue id is below the topic's read queues. Any shard answers for
//! every queue (the table is node-wide), so a batch spanning shards needs no hop. A body
//! that does not parse, or names an illegal group, client or topic, is SYSTEM_ERROR naming
//! what is wrong, as Java answers an undecodable body.

use std::net::SocketAddr;

use serde::Deserialize;
use tokio::time::Instant;

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::admin::admin_json::quoted;
use crate::broker::{naming::names, Broker};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct QueueRef {
    #[serde(default)]
    broker_name: String,
    queue_id: i32,
    topic: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LockBody {
    consumer_group: String,
    client_id: String,
    #[serde(default)]
    mq_set: Vec<QueueRef>,
}

fn parse(request: &RemotingCommand) -> Result<LockBody, String> {
    let body: LockBody = serde_json::from_slice(&request.body)
        .map_err(|error| format!("bad LockBatchRequestBody: {error}"))?;
    names::validate_group(&body.consumer_group)?;
    if body.client_id.is_empty() {
        return Err("LockBatchRequestBody has no clientId".into());
    }
    for queue in &body.mq_set {
        names::validate_topic(&queue.topic)?;
    }
    Ok(body)
}

/// The queues of `body` that are this node's.
fn own_queues(broker: &Broker, body: &LockBody) -> Vec<(String, i32)> {
    body.mq_set
        .iter()
        .filter(|queue| queue.broker_name == broker.identity.broker_name)
        .filter(|queue| {
            broker.topics.get(&queue.topic).is_some_and(|config| {
                queue.queue_id >= 0 && (queue.queue_id as u32) < config.read_queue_nums
            })
        })
        .map(|queue| (queue.topic.clone(), queue.queue_id))
        .collect()
}

pub fn lock_batch(broker: &Broker, request: &RemotingCommand, peer: SocketAddr) -> RemotingCommand {
    let body = match parse(request) {
        Ok(body) => body,
        Err(why) => {
            return RemotingCommand::response_to(request, response::SYSTEM_ERROR, Some(why))
        }
    };
    let queues = own_queues(broker, &body);
    let held = broker.locks.lock_batch(
        &body.consumer_group,
        &body.client_id,
        peer,
        &queues,
        Instant::now(),
    );
    let items: Vec<String> = held
        .iter()
        .map(|(topic, queue_id)| {
            crate::broker::admin::admin_json::queue_key(
                &broker.identity.broker_name,
                topic,
                *queue_id,
            )
        })
        .collect();
    let answer = format!("{{{}:[{}]}}", quoted("lockOKMQSet"), items.join(","));
    RemotingCommand::response_to(request, response::SUCCESS, None).with_body(answer.into_bytes())
}

pub fn unlock_batch(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let body = match parse(request) {
        Ok(body) => body,
        Err(why) => {
            return RemotingCommand::response_to(request, response::SYSTEM_ERROR, Some(why))
        }
    };
    let queues = own_queues(broker, &body);
    broker
        .locks
        .unlock_batch(&body.consumer_group, &body.client_id, &queues);
    RemotingCommand::response_to(request, response::SUCCESS, None)
}
