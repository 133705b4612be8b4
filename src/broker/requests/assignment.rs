//! QUERY_ASSIGNMENT (400): server-side queue assignment. A 5.x client may ask the broker
//! which queues of a topic it should consume instead of computing it itself; the broker
//! answers with the same allocation the client-side strategies compute (reference §9.9),
//! over the group's clients as heartbeats registered them.
//!
//! Request body (JSON): `{"topic", "consumerGroup", "clientId", "strategyName",
//! "messageModel"}`. Response body: `{"messageQueueAssignments": [{"messageQueue":
//! {"topic", "brokerName", "queueId"}, "mode": "PULL", "attachments": {}}]}`.
//!
//! Rules:
//! - BROADCASTING: every client gets every read queue.
//! - CLUSTERING: queue ids `0..readQueueNums` and the group's client ids are each sorted,
//!   then split by the strategy: `AVG` (default, and when `strategyName` is empty) or
//!   `AVG_BY_CIRCLE`. A client the group does not know (no heartbeat yet) gets none.
//! - POP: a group switched to POP for the topic (SET_MESSAGE_REQUEST_MODE,
//!   [`crate::broker::tables::request_modes`]) gets every read queue with `mode: "POP"`, in either model:
//!   POP members share queues, the broker hands each message to one of them. Java hands
//!   out one `queueId: -1` ("any queue") per broker instead; concrete queues let each
//!   pop go straight to the shard that owns its queue, and -1 is still served
//!   ([`crate::broker::pop`]).
//! - An unknown topic is TOPIC_NOT_EXIST, an unknown strategy or model SYSTEM_ERROR, and a
//!   body that is not the JSON above SYSTEM_ERROR naming the parse error.

use serde::{Deserialize, Serialize};

use crate::remoting::codes::response;
use crate::remoting::RemotingCommand;

use crate::broker::Broker;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct QueryAssignmentRequestBody {
    topic: String,
    consumer_group: String,
    client_id: String,
    #[serde(default)]
    strategy_name: Option<String>,
    #[serde(default)]
    message_model: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct QueryAssignmentResponseBody<'a> {
    message_queue_assignments: Vec<Assignment<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Assignment<'a> {
    message_queue: MessageQueue<'a>,
    mode: &'static str,
    attachments: std::collections::BTreeMap<String, String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MessageQueue<'a> {
    topic: &'a str,
    broker_name: &'a str,
    queue_id: u32,
}

/// `AllocateMessageQueueAveragely`: the queues (by index into `queues`) client `index` of
/// `clients` takes: a contiguous run, the first `queues % clients` clients one more.
pub fn allocate_averagely(queues: usize, clients: usize, index: usize) -> std::ops::Range<usize> {
    if clients == 0 || index >= clients {
        return 0..0;
    }
    let remainder = queues % clients;
    let size = if queues <= clients {
        1
    } else if index < remainder {
        queues / clients + 1
    } else {
        queues / clients
    };
    let start = if index < remainder {
        index * size
    } else {
        index * size + remainder
    };
    let start = start.min(queues);
    start..(start + size).min(queues)
}

/// `AllocateMessageQueueAveragelyByCircle`: queue `j` goes to client `j % clients`.
pub fn allocate_by_circle(queues: usize, clients: usize, index: usize) -> Vec<usize> {
    if clients == 0 || index >= clients {
        return Vec::new();
    }
    (index..queues).step_by(clients).collect()
}

/// QUERY_ASSIGNMENT (400).
pub fn query_assignment(broker: &Broker, request: &RemotingCommand) -> RemotingCommand {
    let fail = |code, remark: String| RemotingCommand::response_to(request, code, Some(remark));
    let body: QueryAssignmentRequestBody = match serde_json::from_slice(&request.body) {
        Ok(body) => body,
        Err(error) => {
            return fail(
                response::SYSTEM_ERROR,
                format!("bad QUERY_ASSIGNMENT body: {error}"),
            )
        }
    };
    let Some(config) = broker.topics.get(&body.topic) else {
        return fail(
            response::TOPIC_NOT_EXIST,
            format!("topic[{}] not exist", body.topic),
        );
    };
    let queue_count = config.read_queue_nums as usize;
    let pop = broker
        .request_modes
        .is_pop(&body.topic, &body.consumer_group);
    let chosen: Vec<usize> = match body.message_model.as_deref().unwrap_or("CLUSTERING") {
        "BROADCASTING" | "CLUSTERING" if pop => (0..queue_count).collect(),
        "BROADCASTING" => (0..queue_count).collect(),
        "CLUSTERING" => {
            let clients = broker
                .groups
                .consumer_ids(&body.consumer_group)
                .unwrap_or_default();
            let index = clients.iter().position(|id| *id == body.client_id);
            let index = index.unwrap_or(usize::MAX);
            match body.strategy_name.as_deref().unwrap_or("") {
                "" | "AVG" => allocate_averagely(queue_count, clients.len(), index).collect(),
                "AVG_BY_CIRCLE" => allocate_by_circle(queue_count, clients.len(), index),
                other => {
                    return fail(
                        response::SYSTEM_ERROR,
                        format!("unknown allocation strategy {other:?}: AVG or AVG_BY_CIRCLE"),
                    )
                }
            }
        }
        other => {
            return fail(
                response::SYSTEM_ERROR,
                format!("unknown message model {other:?}: CLUSTERING or BROADCASTING"),
            )
        }
    };
    let broker_name = broker.identity.broker_name.as_str();
    let answer = QueryAssignmentResponseBody {
        message_queue_assignments: chosen
            .into_iter()
            .map(|queue_id| Assignment {
                message_queue: MessageQueue {
                    topic: &body.topic,
                    broker_name,
                    queue_id: queue_id as u32,
                },
                mode: if pop { "POP" } else { "PULL" },
                attachments: Default::default(),
            })
            .collect(),
    };
    let json = serde_json::to_vec(&answer).expect("the assignment serialises");
    RemotingCommand::response_to(request, response::SUCCESS, None).with_body(json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averagely_matches_the_reference_split() {
        // 8 queues, 3 clients: 3, 3, 2.
        let split: Vec<_> = (0..3).map(|i| allocate_averagely(8, 3, i)).collect();
        assert_eq!(split, vec![0..3, 3..6, 6..8]);
        // More clients than queues: the extra ones get nothing.
        let split: Vec<_> = (0..4).map(|i| allocate_averagely(2, 4, i)).collect();
        assert_eq!(split, vec![0..1, 1..2, 2..2, 2..2]);
        assert_eq!(allocate_averagely(8, 2, 1), 4..8);
        assert_eq!(allocate_averagely(8, 0, 0), 0..0);
        assert_eq!(allocate_averagely(8, 2, usize::MAX), 0..0);
    }

    #[test]
    fn every_queue_goes_to_exactly_one_client() {
        for queues in 0..20 {
            for clients in 1..8 {
                let mut seen = vec![0; queues];
                for index in 0..clients {
                    for q in allocate_averagely(queues, clients, index) {
                        seen[q] += 1;
                    }
                }
                assert!(seen.iter().all(|&n| n == 1), "{queues} over {clients}");
                let mut seen = vec![0; queues];
                for index in 0..clients {
                    for q in allocate_by_circle(queues, clients, index) {
                        seen[q] += 1;
                    }
                }
                assert!(
                    seen.iter().all(|&n| n == 1),
                    "circle {queues} over {clients}"
                );
            }
        }
    }

    #[test]
    fn by_circle_deals_queues_round_robin() {
        assert_eq!(allocate_by_circle(8, 3, 1), vec![1, 4, 7]);
    }
}
