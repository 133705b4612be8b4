//! A node in-process, its broker port and its embedded name-server port: routes for unknown
//! topics (auto-create on and off), topic creation, listing and deletion, queue ids checked
//! against the topic, the topic table surviving a restart and a corrupt one stopping the
//! start, and the cluster info shape.

use crate::common;

use common::command;

use std::path::Path;

use common::run_local;
use ringmq::client::{send_request_v2, Client};
use ringmq::node::NodeHandle;
use ringmq::node_config::NodeConfig;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::RemotingCommand;
use serde_json::Value;

fn options(dir: &Path, auto_create: bool) -> NodeConfig {
    let mut options = common::node_config(dir);
    options.auto_create_topic_enable = auto_create;
    options
}

fn start(dir: &Path, auto_create: bool) -> NodeHandle {
    ringmq::node::start(options(dir, auto_create)).expect("node starts")
}

fn route_request(topic: &str) -> RemotingCommand {
    command(
        request::GET_ROUTEINFO_BY_TOPIC,
        &[("topic", topic), ("acceptStandardJsonOnly", "true")],
    )
}

fn create_request(topic: &str, read: u32, write: u32) -> RemotingCommand {
    let (read, write) = (read.to_string(), write.to_string());
    command(
        request::UPDATE_AND_CREATE_TOPIC,
        &[
            ("topic", topic),
            ("defaultTopic", "TBW102"),
            ("readQueueNums", &read),
            ("writeQueueNums", &write),
            ("perm", "6"),
            ("topicFilterType", "SINGLE_TAG"),
            ("topicSysFlag", "0"),
            ("order", "false"),
        ],
    )
}

fn json_body(answer: &RemotingCommand) -> Value {
    serde_json::from_slice(&answer.body)
        .unwrap_or_else(|error| panic!("body is not JSON ({error}): {answer:?}"))
}

/// GET_ALL_TOPIC_CONFIG's `topicConfigTable`.
async fn topic_table(client: &Client) -> serde_json::Map<String, Value> {
    let answer = client
        .request(command(request::GET_ALL_TOPIC_CONFIG, &[]))
        .await
        .unwrap();
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    let body = json_body(&answer);
    assert!(body["dataVersion"]["counter"].is_i64(), "{body}");
    body["topicConfigTable"].as_object().unwrap().clone()
}

#[test]
fn route_for_an_unknown_topic_with_auto_create_has_the_default_queues_on_this_broker() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), true);
    let (broker, namesrv) = (node.addr(), node.namesrv_addr());
    assert_ne!(broker.port(), namesrv.port());
    run_local(false, async move {
        let names = Client::connect(namesrv).await.unwrap();
        let answer = names.request(route_request("Fresh")).await.unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let route = json_body(&answer);
        let brokers = route["brokerDatas"].as_array().unwrap();
        assert_eq!(brokers.len(), 1);
        assert_eq!(brokers[0]["brokerName"], "broker-a");
        assert_eq!(brokers[0]["cluster"], "DefaultCluster");
        assert_eq!(brokers[0]["brokerAddrs"]["0"], broker.to_string());
        let queues = route["queueDatas"].as_array().unwrap();
        assert_eq!(queues.len(), 1);
        assert_eq!(queues[0]["brokerName"], "broker-a");
        assert_eq!(queues[0]["readQueueNums"], 8);
        assert_eq!(queues[0]["writeQueueNums"], 8);
        assert_eq!(queues[0]["perm"], 6);
        assert_eq!(queues[0]["topicSysFlag"], 0);
        assert_eq!(route["filterServerTable"], serde_json::json!({}));

        // The topic now exists on the broker with those queues.
        let client = Client::connect(broker).await.unwrap();
        let table = topic_table(&client).await;
        assert_eq!(table["Fresh"]["writeQueueNums"], 8);

        // The name server port answers nothing else; the broker port answers no routes.
        let answer = names
            .request(send_request_v2("Fresh", 0, b"x", None, None))
            .await
            .unwrap();
        assert_eq!(answer.code, response::REQUEST_CODE_NOT_SUPPORTED);
        let answer = client.request(route_request("Fresh")).await.unwrap();
        assert_eq!(answer.code, response::REQUEST_CODE_NOT_SUPPORTED);
    });
}

#[test]
fn without_auto_create_unknown_topics_have_no_route_and_refuse_sends() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), false);
    let (broker, namesrv) = (node.addr(), node.namesrv_addr());
    run_local(false, async move {
        let names = Client::connect(namesrv).await.unwrap();
        let answer = names.request(route_request("Unknown")).await.unwrap();
        assert_eq!(answer.code, response::TOPIC_NOT_EXIST, "{answer:?}");
        assert!(answer.remark.unwrap().contains("Unknown"));

        let client = Client::connect(broker).await.unwrap();
        let answer = client
            .send_message("Unknown", 0, b"x", None, None)
            .await
            .unwrap();
        assert_eq!(answer.code, response::TOPIC_NOT_EXIST, "{answer:?}");
        assert!(answer.remark.unwrap().contains("Unknown"));
        assert!(!topic_table(&client).await.contains_key("Unknown"));

        // A created topic takes sends and has a route.
        let answer = client.request(create_request("Made", 2, 2)).await.unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let answer = client
            .send_message("Made", 1, b"x", None, None)
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let answer = names.request(route_request("Made")).await.unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        assert_eq!(json_body(&answer)["queueDatas"][0]["writeQueueNums"], 2);
    });
}

#[test]
fn a_created_topic_is_listed_with_its_queue_counts() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), true);
    let broker = node.addr();
    run_local(false, async move {
        let client = Client::connect(broker).await.unwrap();
        let answer = client
            .request(create_request("Orders", 3, 5))
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let table = topic_table(&client).await;
        let orders = &table["Orders"];
        assert_eq!(orders["topicName"], "Orders");
        assert_eq!(orders["readQueueNums"], 3);
        assert_eq!(orders["writeQueueNums"], 5);
        assert_eq!(orders["perm"], 6);
        assert_eq!(orders["topicFilterType"], "SINGLE_TAG");
        assert_eq!(orders["order"], false);
    });
}

#[test]
fn a_send_to_a_queue_beyond_the_topics_write_queues_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), true);
    let broker = node.addr();
    run_local(false, async move {
        let client = Client::connect(broker).await.unwrap();
        let answer = client.request(create_request("Small", 4, 4)).await.unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let answer = client
            .send_message("Small", 3, b"x", None, None)
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let answer = client
            .send_message("Small", 4, b"x", None, None)
            .await
            .unwrap();
        assert_eq!(answer.code, response::SYSTEM_ERROR, "{answer:?}");
        assert!(answer.remark.unwrap().contains("queueId[4]"));

        // An auto-created topic has the default 8 queues: 7 is in, 8 is out.
        let answer = client
            .send_message("Auto", 7, b"x", None, None)
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let answer = client
            .send_message("Auto", 8, b"x", None, None)
            .await
            .unwrap();
        assert_eq!(answer.code, response::SYSTEM_ERROR, "{answer:?}");
    });
}

#[test]
fn topics_survive_a_restart_on_the_same_directory() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), true);
    let broker = node.addr();
    run_local(false, async move {
        let client = Client::connect(broker).await.unwrap();
        let answer = client.request(create_request("Kept", 2, 6)).await.unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    });
    node.shutdown().unwrap();

    let node = start(dir.path(), false);
    let broker = node.addr();
    run_local(false, async move {
        let client = Client::connect(broker).await.unwrap();
        let table = topic_table(&client).await;
        assert_eq!(table["Kept"]["readQueueNums"], 2);
        assert_eq!(table["Kept"]["writeQueueNums"], 6);
        // Known after the restart even with auto-create off.
        let answer = client
            .send_message("Kept", 5, b"x", None, None)
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    });
}

#[test]
fn a_corrupt_topic_table_stops_the_start_with_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("config")).unwrap();
    let file = dir.path().join("config").join("topics.json");
    std::fs::write(&file, b"{\"topicConfigTable\": {\"T\": ").unwrap();
    let error = match ringmq::node::start(options(dir.path(), true)) {
        Ok(_) => panic!("a node started on a corrupt topics.json"),
        Err(error) => format!("{error:#}"),
    };
    assert!(error.contains(&file.display().to_string()), "{error}");
    assert!(error.contains("corrupt"), "{error}");
    // The file is left as it was for the operator.
    assert_eq!(
        std::fs::read(&file).unwrap(),
        b"{\"topicConfigTable\": {\"T\": "
    );
}

#[test]
fn cluster_info_names_this_broker_in_its_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), true);
    let (broker, namesrv) = (node.addr(), node.namesrv_addr());
    run_local(false, async move {
        let names = Client::connect(namesrv).await.unwrap();
        let answer = names
            .request(command(request::GET_BROKER_CLUSTER_INFO, &[]))
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let info = json_body(&answer);
        assert_eq!(
            info["clusterAddrTable"],
            serde_json::json!({"DefaultCluster": ["broker-a"]})
        );
        let entry = &info["brokerAddrTable"]["broker-a"];
        assert_eq!(entry["brokerName"], "broker-a");
        assert_eq!(entry["cluster"], "DefaultCluster");
        assert_eq!(
            entry["brokerAddrs"],
            serde_json::json!({"0": broker.to_string()})
        );
        assert_eq!(info.as_object().unwrap().len(), 2);
    });
}

#[test]
fn a_deleted_topic_is_gone_from_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), false);
    let (broker, namesrv) = (node.addr(), node.namesrv_addr());
    run_local(false, async move {
        let client = Client::connect(broker).await.unwrap();
        let answer = client
            .request(create_request("Doomed", 4, 4))
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        assert!(topic_table(&client).await.contains_key("Doomed"));
        let answer = client
            .request(command(
                request::DELETE_TOPIC_IN_BROKER,
                &[("topic", "Doomed")],
            ))
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        assert!(!topic_table(&client).await.contains_key("Doomed"));
        let names = Client::connect(namesrv).await.unwrap();
        let answer = names.request(route_request("Doomed")).await.unwrap();
        assert_eq!(answer.code, response::TOPIC_NOT_EXIST, "{answer:?}");
    });
}

#[test]
fn an_illegal_topic_name_is_refused_with_a_remark() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), true);
    let broker = node.addr();
    run_local(false, async move {
        let client = Client::connect(broker).await.unwrap();
        let answer = client
            .request(create_request("bad/name", 4, 4))
            .await
            .unwrap();
        assert_eq!(answer.code, response::SYSTEM_ERROR, "{answer:?}");
        let remark = answer.remark.unwrap();
        assert!(
            remark.contains("illegal") && remark.contains("'/'"),
            "{remark}"
        );
        assert!(!topic_table(&client).await.contains_key("bad/name"));

        // Queue counts out of range are refused too.
        let answer = client.request(create_request("Fine", 0, 4)).await.unwrap();
        assert_eq!(answer.code, response::INVALID_PARAMETER, "{answer:?}");
        assert!(answer.remark.unwrap().contains("readQueueNums"));
    });
}
