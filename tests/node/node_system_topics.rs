//! Client sends to the topics only the node writes (RocketMQ's
//! `TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET`, plus the `rmq_sys_` internals) are refused
//! with NO_PERMISSION and Java's remark, store nothing and create no topic, on one shard
//! and when a second shard would have routed them; the trace topic stays open to clients;
//! and the node's own in-process path (`Store::put`) still writes them.

use crate::common;

use common::{as_disk, message, run_local, sim_disk};
use ringmq::broker::naming::names::NOT_ALLOWED_SEND_TOPICS;
use ringmq::client::{queue_request, send_request_v1, Client};
use ringmq::clock::Clock;
use ringmq::config::StoreConfig;
use ringmq::node_config::NodeConfig;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::{ExtFields, RemotingCommand};
use ringmq::store::{PutStatus, Store};

fn options(dir: &std::path::Path, shards: u8) -> NodeConfig {
    let mut options = common::node_config(dir);
    options.shards = shards;
    options
}

fn refused_topics() -> Vec<&'static str> {
    let mut topics = NOT_ALLOWED_SEND_TOPICS.to_vec();
    topics.extend(["rmq_sys_wheel_timer", "rmq_sys_REVIVE_LOG_DefaultCluster"]);
    topics
}

/// Sends one message to each refused topic (V1 and V2, a chosen queue and "the broker
/// picks"), checks each answer, then that no such topic exists and nothing is stored.
async fn sends_are_refused(client: &Client) {
    for topic in refused_topics() {
        for queue_id in [0, -1] {
            for (version, cmd) in [
                (
                    "v2",
                    ringmq::client::send_request_v2(topic, queue_id, b"x", None, None),
                ),
                ("v1", send_request_v1(topic, queue_id, b"x", None, None)),
            ] {
                let answer = client.request(cmd).await.unwrap();
                assert_eq!(
                    answer.code,
                    response::NO_PERMISSION,
                    "{topic} queue {queue_id} {version}: {answer:?}"
                );
                assert_eq!(
                    answer.remark.as_deref(),
                    Some(format!("Sending message to topic[{topic}] is forbidden.").as_str())
                );
            }
        }
        let max = client
            .request(queue_request(request::GET_MAX_OFFSET, topic, 0))
            .await
            .unwrap();
        assert_eq!(
            max.ext_fields.get("offset").map(|v| v.to_string()),
            Some("0".to_string())
        );
    }
    let all = client
        .request(RemotingCommand::request(
            request::GET_ALL_TOPIC_CONFIG,
            ExtFields::new(),
        ))
        .await
        .unwrap();
    let table: serde_json::Value = serde_json::from_slice(&all.body).unwrap();
    for topic in refused_topics() {
        assert!(
            table["topicConfigTable"].get(topic).is_none(),
            "a refused send created {topic}: {table}"
        );
    }
    // Clients write message traces to RMQ_SYS_TRACE_TOPIC: that stays open.
    let answer = client
        .send_message("RMQ_SYS_TRACE_TOPIC", -1, b"trace", None, None)
        .await
        .unwrap();
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
}

#[test]
fn a_client_send_to_a_system_topic_is_refused_with_no_permission_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let node = ringmq::node::start(options(dir.path(), 1)).expect("node starts");
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        sends_are_refused(&client).await;
    });
    node.shutdown().unwrap();
}

#[test]
fn a_route_query_for_a_system_topic_does_not_create_it() {
    let dir = tempfile::tempdir().unwrap();
    let node = ringmq::node::start(options(dir.path(), 1)).expect("node starts");
    let (broker, namesrv) = (node.addr(), node.namesrv_addr());
    run_local(false, async move {
        let names = Client::connect(namesrv).await.unwrap();
        for topic in refused_topics() {
            let mut fields = ExtFields::new();
            fields.insert("topic".into(), topic);
            let answer = names
                .request(RemotingCommand::request(
                    request::GET_ROUTEINFO_BY_TOPIC,
                    fields,
                ))
                .await
                .unwrap();
            assert_eq!(
                answer.code,
                response::TOPIC_NOT_EXIST,
                "{topic}: {answer:?}"
            );
        }
        let client = Client::connect(broker).await.unwrap();
        sends_are_refused(&client).await;
    });
    node.shutdown().unwrap();
}

#[test]
fn a_system_topic_send_left_to_the_broker_is_refused_on_two_shards_before_routing() {
    let dir = tempfile::tempdir().unwrap();
    let node = ringmq::node::start(options(dir.path(), 2)).expect("node starts");
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        sends_are_refused(&client).await;
    });
    node.shutdown().unwrap();
}

#[test]
fn the_nodes_own_puts_to_a_system_topic_are_stored() {
    let sim = sim_disk(7);
    run_local(true, async {
        let store = Store::open(
            StoreConfig::test_min("/store"),
            as_disk(&sim),
            Clock::starting_at(1_700_000_000_000),
        )
        .await
        .unwrap();
        for topic in refused_topics() {
            let result = store
                .put(message(topic, 0, b"internal", None, None))
                .await
                .unwrap();
            assert_eq!(result.status, PutStatus::Ok, "{topic}");
            assert_eq!(store.max_offset(topic, 0), 1, "{topic}");
        }
    });
}
