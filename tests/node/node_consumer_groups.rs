//! Consumer groups over the wire: heartbeats register clients, GET_CONSUMER_LIST_BY_GROUP
//! lists them sorted, UNREGISTER_CLIENT and expiry remove them, and a pull without a
//! subscription is filtered by the group's heartbeat subscription.

use crate::common;

use std::time::Duration;

use common::{consumer_heartbeat as heartbeat, pull_bodies, run_local};
use ringmq::client::{pull_request, Client};
use ringmq::node::NodeHandle;
use ringmq::node_config::NodeConfig;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::{ExtFields, RemotingCommand};
use ringmq::store::properties;

fn node(dir: &std::path::Path, tune: impl FnOnce(&mut NodeConfig)) -> NodeHandle {
    let mut options = common::node_config(dir);
    tune(&mut options);
    ringmq::node::start(options).expect("node starts")
}

fn consumer_list(group: &str) -> RemotingCommand {
    let mut fields = ExtFields::new();
    fields.insert("consumerGroup".into(), group);
    RemotingCommand::request(request::GET_CONSUMER_LIST_BY_GROUP, fields)
}

async fn members(client: &Client, group: &str) -> Option<Vec<String>> {
    let answer = client.request(consumer_list(group)).await.unwrap();
    if answer.code != response::SUCCESS {
        assert_eq!(answer.code, response::SYSTEM_ERROR, "{answer:?}");
        assert!(
            answer
                .remark
                .as_deref()
                .unwrap_or("")
                .contains("no consumer for this group"),
            "{answer:?}"
        );
        return None;
    }
    let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    let ids = body["consumerIdList"].as_array().expect("consumerIdList");
    Some(
        ids.iter()
            .map(|id| id.as_str().unwrap().to_owned())
            .collect(),
    )
}

#[test]
fn two_heartbeating_clients_are_listed_sorted_and_unregister_removes_one() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path(), |_| {});
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        assert_eq!(members(&client, "g1").await, None);
        for id in ["10.0.0.9@222", "10.0.0.5@111"] {
            let answer = client.request(heartbeat(id, "g1", "T", "*")).await.unwrap();
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        }
        assert_eq!(
            members(&client, "g1").await.unwrap(),
            ["10.0.0.5@111", "10.0.0.9@222"]
        );
        // A second heartbeat from the same client does not list it twice.
        client
            .request(heartbeat("10.0.0.5@111", "g1", "T", "*"))
            .await
            .unwrap();
        assert_eq!(members(&client, "g1").await.unwrap().len(), 2);

        let mut fields = ExtFields::new();
        fields.insert("clientID".into(), "10.0.0.9@222");
        fields.insert("consumerGroup".into(), "g1");
        let answer = client
            .request(RemotingCommand::request(request::UNREGISTER_CLIENT, fields))
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        assert_eq!(members(&client, "g1").await.unwrap(), ["10.0.0.5@111"]);
    });
    node.shutdown().unwrap();
}

#[test]
fn a_client_silent_past_the_expiry_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path(), |options| {
        options.channel_expired_timeout = Duration::from_millis(400);
        options.client_sweep_interval = Duration::from_millis(20);
    });
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        client
            .request(heartbeat("b@2", "g", "T", "*"))
            .await
            .unwrap();
        client
            .request(heartbeat("a@1", "g", "T", "*"))
            .await
            .unwrap();
        assert_eq!(members(&client, "g").await.unwrap(), ["a@1", "b@2"]);
        // a@1 keeps heartbeating, b@2 goes silent; wait (bounded) for the sweep.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            client
                .request(heartbeat("a@1", "g", "T", "*"))
                .await
                .unwrap();
            if members(&client, "g").await.unwrap() == ["a@1"] {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "b@2 was never dropped"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    node.shutdown().unwrap();
}

#[test]
fn a_heartbeat_tag_subscription_filters_a_pull_that_carries_none() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path(), |_| {});
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        for i in 0..4 {
            let tags = if i % 2 == 0 { "TagA" } else { "TagB" };
            let body = format!("m{i}");
            let answer = client
                .send_message("Filtered", 0, body.as_bytes(), Some(tags), None)
                .await
                .unwrap();
            assert_eq!(answer.code, response::SUCCESS);
        }
        let answer = client
            .request(heartbeat("c@1", "ringmq-consumer", "Filtered", "TagB"))
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS);
        // `pull_request` uses group "ringmq-consumer" and sets no subscription bit.
        let answer = client
            .request(pull_request("Filtered", 0, 0, 32, None, None))
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let bodies = pull_bodies(&answer.body);
        assert_eq!(bodies, ["m1", "m3"]);

        // A pull whose subVersion is newer than the heartbeat's is told to heartbeat again.
        let mut newer = pull_request("Filtered", 0, 0, 32, None, None);
        newer.put_ext("subVersion", 1_800_000_000_000_i64);
        let answer = client.request(newer).await.unwrap();
        assert_eq!(answer.code, response::SUBSCRIPTION_NOT_LATEST, "{answer:?}");
    });
    node.shutdown().unwrap();
}

/// rocketmq-client-rust 1.0.0 hashes the untrimmed tags of "TagA || TagB" into its
/// heartbeat's `codeSet` ("TagA " and " TagB"); the trimmed tags are still selected.
#[test]
fn a_heartbeat_with_untrimmed_tag_codes_still_selects_the_tags() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path(), |_| {});
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        for (i, tags) in ["TagA", "TagB", "TagC", "TagA"].into_iter().enumerate() {
            let body = format!("m{i}");
            let answer = client
                .send_message("Spaced", 0, body.as_bytes(), Some(tags), None)
                .await
                .unwrap();
            assert_eq!(answer.code, response::SUCCESS);
        }
        let mut beat = heartbeat("c@1", "ringmq-consumer", "Spaced", "TagA || TagB");
        let mut body: serde_json::Value = serde_json::from_slice(&beat.body).unwrap();
        let sub = &mut body["consumerDataSet"][0]["subscriptionDataSet"][0];
        sub["tagsSet"] = serde_json::json!(["TagA", "TagB"]);
        sub["codeSet"] = serde_json::json!([
            properties::java_string_hash("TagA "),
            properties::java_string_hash(" TagB")
        ]);
        beat = beat.with_body(body.to_string());
        let answer = client.request(beat).await.unwrap();
        assert_eq!(answer.code, response::SUCCESS);
        let answer = client
            .request(pull_request("Spaced", 0, 0, 32, None, None))
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let bodies = pull_bodies(&answer.body);
        assert_eq!(bodies, ["m0", "m1", "m3"]);
    });
    node.shutdown().unwrap();
}
