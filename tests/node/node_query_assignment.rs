//! QUERY_ASSIGNMENT (400): the broker splits a topic's queues between the clients of a
//! consumer group as heartbeats registered them. Two clients in clustering mode get
//! disjoint halves that cover every queue (AVG and AVG_BY_CIRCLE); a broadcasting client
//! gets every queue; a client the group does not know gets none; an unknown topic,
//! strategy or a broken body get an error response naming the problem.

use crate::common;

use common::run_local;
use ringmq::client::{send_request_v1, Client};
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::{ExtFields, RemotingCommand};

const TOPIC: &str = "Assigned";
const GROUP: &str = "assigned-group";

/// `client_id`'s heartbeat as a member of the group, subscribed to every tag.
fn heartbeat(client_id: &str) -> RemotingCommand {
    common::consumer_heartbeat(client_id, GROUP, TOPIC, "*")
}

fn query(client_id: &str, strategy: &str, model: &str) -> RemotingCommand {
    let body = serde_json::json!({
        "topic": TOPIC,
        "consumerGroup": GROUP,
        "clientId": client_id,
        "strategyName": strategy,
        "messageModel": model,
    });
    RemotingCommand::request(request::QUERY_ASSIGNMENT, ExtFields::new())
        .with_body(body.to_string())
}

/// The queue ids of a SUCCESS answer, sorted; checks each entry's shape.
fn queues(answer: &RemotingCommand) -> Vec<u32> {
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    let mut ids: Vec<u32> = body["messageQueueAssignments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            assert_eq!(entry["mode"], "PULL", "{entry}");
            assert_eq!(entry["messageQueue"]["topic"], TOPIC, "{entry}");
            assert_eq!(entry["messageQueue"]["brokerName"], "broker-a", "{entry}");
            entry["messageQueue"]["queueId"].as_u64().unwrap() as u32
        })
        .collect();
    ids.sort_unstable();
    ids
}

/// The queues QUERY_ASSIGNMENT gives `client_id` under `strategy` and `model`.
async fn assigned(client: &Client, client_id: &str, strategy: &str, model: &str) -> Vec<u32> {
    queues(
        &client
            .request(query(client_id, strategy, model))
            .await
            .unwrap(),
    )
}

#[test]
fn the_broker_splits_a_topics_queues_between_the_groups_clients() {
    let dir = tempfile::tempdir().unwrap();
    let node = common::start_node(dir.path());
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        // Unknown topic first: an error naming it.
        let answer = client
            .request(query("a", "AVG", "CLUSTERING"))
            .await
            .unwrap();
        assert_eq!(answer.code, response::TOPIC_NOT_EXIST, "{answer:?}");
        assert!(answer.remark.as_deref().unwrap().contains(TOPIC));
        // The send creates the topic with the default 8 queues.
        let sent = client
            .request(send_request_v1(TOPIC, 0, b"x", None, None))
            .await
            .unwrap();
        assert_eq!(sent.code, response::SUCCESS, "{sent:?}");
        for id in ["client-b", "client-a"] {
            let answer = client.request(heartbeat(id)).await.unwrap();
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        }

        // AVG: client ids sorted, contiguous halves.
        let a = assigned(&client, "client-a", "AVG", "CLUSTERING").await;
        let b = assigned(&client, "client-b", "", "CLUSTERING").await;
        assert_eq!(a, vec![0, 1, 2, 3]);
        assert_eq!(b, vec![4, 5, 6, 7]);
        // AVG_BY_CIRCLE: dealt round-robin.
        let a = assigned(&client, "client-a", "AVG_BY_CIRCLE", "CLUSTERING").await;
        assert_eq!(a, vec![0, 2, 4, 6]);

        // A client without a heartbeat gets none; broadcasting gets every queue.
        let stranger = assigned(&client, "client-z", "AVG", "CLUSTERING").await;
        assert!(stranger.is_empty(), "{stranger:?}");
        let all = assigned(&client, "client-a", "AVG", "BROADCASTING").await;
        assert_eq!(all, (0..8).collect::<Vec<u32>>());

        // Bad input answers with an error naming it.
        let answer = client
            .request(query("client-a", "HASH_RING", "CLUSTERING"))
            .await
            .unwrap();
        assert_eq!(answer.code, response::SYSTEM_ERROR, "{answer:?}");
        assert!(answer.remark.as_deref().unwrap().contains("HASH_RING"));
        let broken = RemotingCommand::request(request::QUERY_ASSIGNMENT, ExtFields::new())
            .with_body(b"{not json".to_vec());
        let answer = client.request(broken).await.unwrap();
        assert_eq!(answer.code, response::SYSTEM_ERROR, "{answer:?}");
        assert!(answer
            .remark
            .as_deref()
            .unwrap()
            .contains("QUERY_ASSIGNMENT body"));
    });
    node.shutdown().unwrap();
}
