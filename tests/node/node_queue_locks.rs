//! LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42) on a node of two shards: a client locks
//! queues of both shards in one batch; another client of the group gets none of them until
//! the first unlocks one or its connection closes; queues that are not this node's (another
//! broker name, an unknown topic, a queue id past the read queues) are never locked; a body
//! that does not parse, or names an illegal group, is refused naming the problem.

use crate::common;

use common::raw::Raw;
use ringmq::node_config::NodeConfig;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::RemotingCommand;
use serde_json::{json, Value};

const TOPIC: &str = "Ordered";
const GROUP: &str = "orderly-group";
const QUEUES: i32 = 4;

fn options(dir: &std::path::Path) -> NodeConfig {
    let mut options = common::node_config(dir);
    options.shards = 2;
    options
}

fn queue(broker: &str, topic: &str, id: i32) -> Value {
    json!({"brokerName": broker, "queueId": id, "topic": topic})
}

fn batch(code: i32, client: &str, queues: Vec<Value>) -> RemotingCommand {
    let body = json!({
        "consumerGroup": GROUP,
        "clientId": client,
        "onlyThisBroker": false,
        "mqSet": queues,
    });
    RemotingCommand::request(code, Default::default()).with_body(body.to_string())
}

fn ours(ids: &[i32]) -> Vec<Value> {
    ids.iter().map(|id| queue("broker-a", TOPIC, *id)).collect()
}

/// The queue ids a LOCK_BATCH_MQ answer says the client holds, sorted.
fn locked(raw: &mut Raw, client: &str, queues: Vec<Value>) -> Vec<i64> {
    let answer = raw.call(batch(request::LOCK_BATCH_MQ, client, queues));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    let body: Value = serde_json::from_slice(&answer.body).unwrap();
    let mut ids: Vec<i64> = body["lockOKMQSet"]
        .as_array()
        .unwrap_or_else(|| panic!("no lockOKMQSet in {body}"))
        .iter()
        .map(|mq| {
            assert_eq!(mq["topic"], TOPIC, "{body}");
            assert_eq!(mq["brokerName"], "broker-a", "{body}");
            mq["queueId"].as_i64().unwrap()
        })
        .collect();
    ids.sort();
    ids
}

#[test]
fn queue_locks_are_held_by_one_client_and_freed_by_unlock_or_a_closed_connection() {
    let dir = tempfile::tempdir().unwrap();
    let node = ringmq::node::start(options(dir.path())).unwrap();
    let mut a = Raw::connect(node.addr());
    let mut b = Raw::connect(node.addr());
    common::create_topic(&mut a, TOPIC, QUEUES as u32);

    // Four queues, spread over both shards, in one batch; renewing gives the same.
    assert_eq!(
        locked(&mut a, "client-a", ours(&[0, 1, 2, 3])),
        [0, 1, 2, 3]
    );
    assert_eq!(
        locked(&mut a, "client-a", ours(&[0, 1, 2, 3])),
        [0, 1, 2, 3]
    );
    assert!(locked(&mut b, "client-b", ours(&[0, 1, 2, 3])).is_empty());

    // Only the holder's unlock frees a queue.
    let answer = b.call(batch(request::UNLOCK_BATCH_MQ, "client-b", ours(&[0])));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    assert!(locked(&mut b, "client-b", ours(&[0])).is_empty());
    let answer = a.call(batch(request::UNLOCK_BATCH_MQ, "client-a", ours(&[0])));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    assert_eq!(locked(&mut b, "client-b", ours(&[0])), [0]);

    // Not this node's queues.
    let foreign = vec![
        queue("broker-z", TOPIC, 1),
        queue("broker-a", "NoSuchTopic", 0),
        queue("broker-a", TOPIC, QUEUES),
        queue("broker-a", TOPIC, -1),
    ];
    assert!(locked(&mut b, "client-b", foreign).is_empty());

    // Bad bodies.
    let mut broken = batch(request::LOCK_BATCH_MQ, "client-b", ours(&[1]));
    broken.body = b"{not json".to_vec().into();
    let answer = b.call(broken);
    assert_eq!(answer.code, response::SYSTEM_ERROR, "{answer:?}");
    assert!(answer
        .remark
        .as_deref()
        .unwrap()
        .contains("LockBatchRequestBody"));
    let bad_group = json!({"consumerGroup": "bad group", "clientId": "c", "mqSet": []});
    let answer = b.call(
        RemotingCommand::request(request::LOCK_BATCH_MQ, Default::default())
            .with_body(bad_group.to_string()),
    );
    assert_eq!(answer.code, response::SYSTEM_ERROR, "{answer:?}");

    // a's connection closes: its locks go at once, and b takes queues 1 to 3.
    drop(a);
    common::wait_for(
        std::time::Duration::from_secs(10),
        "the closed connection's locks to be freed",
        || locked(&mut b, "client-b", ours(&[1, 2, 3])) == [1, 2, 3],
    );
    node.shutdown().unwrap();
}
