//! Committed consumer offsets over the wire: UPDATE_CONSUMER_OFFSET then
//! QUERY_CONSUMER_OFFSET returns it; an unknown group is QUERY_NOT_FOUND (22), or 0 on a
//! queue whose first message is still in memory, as RocketMQ answers; a pull's
//! piggy-backed commitOffset is stored; offsets survive a clean restart; a corrupt
//! consumerOffset.json stops the start with an error naming the file.

use crate::common;

use common::run_local;
use ringmq::client::{pull_request, Client};
use ringmq::node::NodeHandle;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::FLAG_COMMIT_OFFSET;
use ringmq::remoting::{ExtFields, RemotingCommand};

use common::node_config as options;

fn node(dir: &std::path::Path) -> NodeHandle {
    ringmq::node::start(options(dir)).expect("node starts")
}

fn fields(group: &str, topic: &str, queue_id: i32) -> ExtFields {
    let mut fields = ExtFields::new();
    fields.insert("consumerGroup".into(), group);
    fields.insert("topic".into(), topic);
    fields.insert("queueId".into(), queue_id.to_string());
    fields
}

fn update(group: &str, topic: &str, queue_id: i32, offset: i64) -> RemotingCommand {
    let mut fields = fields(group, topic, queue_id);
    fields.insert("commitOffset".into(), offset.to_string());
    RemotingCommand::request(request::UPDATE_CONSUMER_OFFSET, fields)
}

/// The committed offset, or the response code when it is not SUCCESS.
async fn query(client: &Client, group: &str, topic: &str, queue_id: i32) -> Result<i64, i32> {
    query_with(client, group, topic, queue_id, None).await
}

/// [`query`] with the optional `setZeroIfNotFound` header field.
async fn query_with(
    client: &Client,
    group: &str,
    topic: &str,
    queue_id: i32,
    zero_if_not_found: Option<bool>,
) -> Result<i64, i32> {
    let mut fields = fields(group, topic, queue_id);
    if let Some(zero) = zero_if_not_found {
        fields.insert("setZeroIfNotFound".into(), zero.to_string());
    }
    let cmd = RemotingCommand::request(request::QUERY_CONSUMER_OFFSET, fields);
    let answer = client.request(cmd).await.unwrap();
    if answer.code != response::SUCCESS {
        return Err(answer.code);
    }
    Ok(answer
        .ext_fields
        .get("offset")
        .expect("offset")
        .parse()
        .unwrap())
}

#[test]
fn an_updated_offset_is_returned_by_query() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path());
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        let answer = client.request(update("g", "T", 2, 17)).await.unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        assert_eq!(query(&client, "g", "T", 2).await, Ok(17));
        client.request(update("g", "T", 2, 25)).await.unwrap();
        assert_eq!(query(&client, "g", "T", 2).await, Ok(25));
        // Other queues and groups are separate.
        assert_eq!(
            query(&client, "g", "T", 1).await,
            Err(response::QUERY_NOT_FOUND)
        );
        assert_eq!(
            query(&client, "h", "T", 2).await,
            Err(response::QUERY_NOT_FOUND)
        );
    });
    node.shutdown().unwrap();
}

#[test]
fn a_query_for_an_unknown_group_is_query_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path());
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        assert_eq!(
            query(&client, "nobody", "T", 0).await,
            Err(response::QUERY_NOT_FOUND)
        );
        assert_eq!(response::QUERY_NOT_FOUND, 22);
    });
    node.shutdown().unwrap();
}

#[test]
fn a_new_group_starts_at_zero_on_a_queue_whose_first_message_is_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path());
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        // An empty queue has no first message: not found.
        assert_eq!(
            query(&client, "fresh", "Young", 0).await,
            Err(response::QUERY_NOT_FOUND)
        );
        client
            .send_message("Young", 0, b"x", None, None)
            .await
            .unwrap();
        client
            .send_message("Young", 0, b"y", None, None)
            .await
            .unwrap();
        // As Java's client asks (no setZeroIfNotFound): the queue's start, not its end.
        assert_eq!(query(&client, "fresh", "Young", 0).await, Ok(0));
        assert_eq!(
            query_with(&client, "fresh", "Young", 0, Some(true)).await,
            Ok(0)
        );
        // An explicit false keeps "not found"; so does a queue of no messages.
        assert_eq!(
            query_with(&client, "fresh", "Young", 0, Some(false)).await,
            Err(response::QUERY_NOT_FOUND)
        );
        assert_eq!(
            query(&client, "fresh", "Young", 1).await,
            Err(response::QUERY_NOT_FOUND)
        );
        // A committed offset wins over the zero.
        client
            .request(update("fresh", "Young", 0, 2))
            .await
            .unwrap();
        assert_eq!(query(&client, "fresh", "Young", 0).await, Ok(2));
    });
    node.shutdown().unwrap();
}

#[test]
fn with_no_memory_window_a_new_group_is_not_found_even_on_a_young_queue() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    options.access_message_in_memory_max_ratio = 0;
    let node = ringmq::node::start(options).expect("node starts");
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        client
            .send_message("Old", 0, b"x", None, None)
            .await
            .unwrap();
        client
            .send_message("Old", 0, b"y", None, None)
            .await
            .unwrap();
        // The first record is a record's length behind the end: outside an empty window.
        assert_eq!(
            query(&client, "fresh", "Old", 0).await,
            Err(response::QUERY_NOT_FOUND)
        );
    });
    node.shutdown().unwrap();
}

#[test]
fn a_pulls_commit_offset_updates_the_committed_offset() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path());
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        client.send_message("P", 0, b"x", None, None).await.unwrap();
        let mut pull = pull_request("P", 0, 1, 32, None, None);
        pull.put_ext("sysFlag", FLAG_COMMIT_OFFSET);
        pull.put_ext("commitOffset", 1);
        let answer = client.request(pull).await.unwrap();
        assert_eq!(answer.code, response::PULL_NOT_FOUND, "{answer:?}");
        assert_eq!(query(&client, "ringmq-consumer", "P", 0).await, Ok(1));
        // Without the commit bit the commitOffset is not stored.
        let mut pull = pull_request("P", 0, 0, 32, None, None);
        pull.put_ext("commitOffset", 0);
        client.request(pull).await.unwrap();
        assert_eq!(query(&client, "ringmq-consumer", "P", 0).await, Ok(1));
    });
    node.shutdown().unwrap();
}

#[test]
fn committed_offsets_survive_a_clean_restart() {
    let dir = tempfile::tempdir().unwrap();
    let first = node(dir.path());
    let addr = first.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        for (queue, offset) in [(0, 5), (1, 9), (3, 0)] {
            let answer = client
                .request(update("g1", "TopicTest", queue, offset))
                .await
                .unwrap();
            assert_eq!(answer.code, response::SUCCESS);
        }
        client
            .request(update("g2", "TopicTest", 0, 77))
            .await
            .unwrap();
    });
    first.shutdown().unwrap();
    let text = std::fs::read_to_string(dir.path().join("config/consumerOffset.json")).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["offsetTable"]["TopicTest@g1"]["1"], 9);

    let second = node(dir.path());
    let addr = second.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        assert_eq!(query(&client, "g1", "TopicTest", 0).await, Ok(5));
        assert_eq!(query(&client, "g1", "TopicTest", 1).await, Ok(9));
        assert_eq!(query(&client, "g1", "TopicTest", 3).await, Ok(0));
        assert_eq!(query(&client, "g2", "TopicTest", 0).await, Ok(77));
        assert_eq!(
            query(&client, "g1", "TopicTest", 2).await,
            Err(response::QUERY_NOT_FOUND)
        );
    });
    second.shutdown().unwrap();
}

#[test]
fn a_corrupt_consumer_offset_file_stops_the_start_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("config")).unwrap();
    std::fs::write(
        dir.path().join("config/consumerOffset.json"),
        b"{\"offsetTable\":{\"T@g\":{\"0\":",
    )
    .unwrap();
    let error = match ringmq::node::start(options(dir.path())) {
        Ok(_) => panic!("a node started on a corrupt consumerOffset.json"),
        Err(error) => format!("{error:#}"),
    };
    assert!(error.contains("consumerOffset.json"), "{error}");
    // The store was closed cleanly: the same directory starts once the file is fixed.
    std::fs::remove_file(dir.path().join("config/consumerOffset.json")).unwrap();
    node(dir.path()).shutdown().unwrap();
}

#[test]
fn a_committed_offset_reaches_the_file_within_the_flush_interval_without_a_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path());
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        client.request(update("g", "T", 0, 3)).await.unwrap();
    });
    // Default interval 1 s; wait (bounded) for the periodic write, not for the shutdown one.
    let path = dir.path().join("config/consumerOffset.json");
    common::wait_for(
        std::time::Duration::from_secs(10),
        "the periodic write",
        || {
            std::fs::read_to_string(&path)
                .ok()
                .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
                .is_some_and(|json| json["offsetTable"]["T@g"]["0"] == 3)
        },
    );
    node.shutdown().unwrap();
}
