//! The requests mqadmin's daily commands send beyond the basic admin set, on a node of two
//! shards, each answered in RocketMQ 5.5.0's shape: GET_TOPIC_CONFIG (351),
//! GET_PRODUCER_CONNECTION_LIST (204), GET_BROKER_CONFIG (26), UPDATE_BROKER_CONFIG (25),
//! GET_BROKER_CONSUME_STATS (317), CLONE_GROUP_OFFSET (314), GET_CONSUMER_RUNNING_INFO
//! (307, relayed to the consumer and back), and on the embedded name server
//! WIPE_WRITE_PERM_OF_BROKER (205), ADD_WRITE_PERM_OF_BROKER (327), DELETE_TOPIC_IN_NAMESRV
//! (216), GET_NAMESRV_CONFIG (319), GET_KV_CONFIG (101) and DELETE_KV_CONFIG (102), plus
//! QUERY_TOPIC_CONSUME_BY_WHO (300) and VIEW_BROKER_STATS_DATA (315). One test per request
//! code.

use crate::common;

use std::time::Duration;

use common::command;
use common::raw::Raw;
use ringmq::node::NodeHandle;
use ringmq::node_config::NodeConfig;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::send_request_v1;
use ringmq::remoting::RemotingCommand;
use serde_json::Value;

const TOPIC: &str = "AdminTopic";
const QUEUES: u32 = 4;
const GROUP: &str = "admin-group";

fn options(dir: &std::path::Path) -> NodeConfig {
    let mut options = common::node_config(dir);
    options.shards = 2;
    options
}

fn start(dir: &std::path::Path) -> (NodeHandle, Raw) {
    let node = ringmq::node::start(options(dir)).expect("node starts");
    let mut raw = Raw::connect(node.addr());
    common::create_topic(&mut raw, TOPIC, QUEUES);
    (node, raw)
}

fn json(answer: &RemotingCommand) -> Value {
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    serde_json::from_slice(&answer.body).unwrap_or_else(|error| {
        panic!(
            "not JSON ({error}): {}",
            String::from_utf8_lossy(&answer.body)
        )
    })
}

fn properties(answer: &RemotingCommand) -> Vec<(String, String)> {
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    std::str::from_utf8(&answer.body)
        .unwrap()
        .lines()
        .map(|line| {
            let (key, value) = line.split_once('=').expect("key=value");
            (key.to_owned(), value.to_owned())
        })
        .collect()
}

fn send(raw: &mut Raw, queue: i32) {
    let answer = raw.call(send_request_v1(TOPIC, queue, b"m", None, None));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
}

fn commit(raw: &mut Raw, group: &str, queue: i32, offset: i64) {
    let (queue, offset) = (queue.to_string(), offset.to_string());
    let answer = raw.call(command(
        request::UPDATE_CONSUMER_OFFSET,
        &[
            ("consumerGroup", group),
            ("topic", TOPIC),
            ("queueId", &queue),
            ("commitOffset", &offset),
        ],
    ));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
}

fn committed(raw: &mut Raw, group: &str, queue: i32) -> Option<i64> {
    let queue = queue.to_string();
    let answer = raw.call(command(
        request::QUERY_CONSUMER_OFFSET,
        &[
            ("consumerGroup", group),
            ("topic", TOPIC),
            ("queueId", &queue),
        ],
    ));
    match answer.code {
        response::SUCCESS => Some(answer.ext_fields["offset"].parse().unwrap()),
        _ => None,
    }
}

fn route_perm(namesrv: &mut Raw, topic: &str) -> i64 {
    let route = json(&namesrv.call(command(
        request::GET_ROUTEINFO_BY_TOPIC,
        &[("topic", topic)],
    )));
    route["queueDatas"][0]["perm"].as_i64().unwrap()
}

#[test]
fn get_topic_config_answers_the_topic_config_and_topic_not_exist_for_unknown_topics() {
    let dir = tempfile::tempdir().unwrap();
    let (_node, mut raw) = start(dir.path());
    let answer = raw.call(command(request::GET_TOPIC_CONFIG, &[("topic", TOPIC)]));
    let config = json(&answer);
    assert_eq!(config["topicName"], TOPIC, "{config}");
    assert_eq!(config["readQueueNums"], QUEUES, "{config}");
    assert_eq!(config["writeQueueNums"], QUEUES, "{config}");
    assert_eq!(config["perm"], 6, "{config}");
    assert_eq!(config["topicFilterType"], "SINGLE_TAG", "{config}");
    assert_eq!(config["order"], false, "{config}");
    // fastjson's order: the keys are sorted.
    let keys: Vec<&String> = config.as_object().unwrap().keys().collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    let unknown = raw.call(command(
        request::GET_TOPIC_CONFIG,
        &[("topic", "NoSuchTopic")],
    ));
    assert_eq!(unknown.code, response::TOPIC_NOT_EXIST, "{unknown:?}");
    assert_eq!(
        unknown.remark.as_deref(),
        Some("No topic in this broker. topic: NoSuchTopic")
    );
}

#[test]
fn producer_connections_list_the_clients_whose_heartbeats_named_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let (_node, mut raw) = start(dir.path());
    let ask = || {
        command(
            request::GET_PRODUCER_CONNECTION_LIST,
            &[("producerGroup", "P1")],
        )
    };
    let absent = raw.call(ask());
    assert_eq!(absent.code, response::SYSTEM_ERROR, "{absent:?}");
    assert_eq!(
        absent.remark.as_deref(),
        Some("the producer group[P1] not exist")
    );
    let body = serde_json::json!({
        "clientID": "producer-test@1",
        "producerDataSet": [{"groupName": "P1"}],
        "consumerDataSet": [],
    });
    let beat = raw.call(
        RemotingCommand::request(request::HEART_BEAT, Default::default())
            .with_body(body.to_string()),
    );
    assert_eq!(beat.code, response::SUCCESS, "{beat:?}");
    let listed = json(&raw.call(ask()));
    let set = listed["connectionSet"].as_array().unwrap();
    assert_eq!(set.len(), 1, "{listed}");
    assert_eq!(set[0]["clientId"], "producer-test@1", "{listed}");
    assert!(
        set[0]["clientAddr"]
            .as_str()
            .unwrap()
            .starts_with("127.0.0.1:"),
        "{listed}"
    );
    assert_eq!(set[0]["language"], "JAVA", "{listed}");
    assert!(set[0]["version"].is_i64(), "{listed}");
}

#[test]
fn broker_config_is_every_setting_as_properties_with_a_data_version() {
    let dir = tempfile::tempdir().unwrap();
    let (node, mut raw) = start(dir.path());
    let answer = raw.call(command(request::GET_BROKER_CONFIG, &[]));
    let version: Value = serde_json::from_str(&answer.ext_fields["version"]).unwrap();
    assert!(version["counter"].is_i64(), "{version}");
    let settings = properties(&answer);
    let get = |key: &str| {
        settings
            .iter()
            .find(|(k, _)| k == key)
            .unwrap_or_else(|| panic!("no {key} in {settings:?}"))
            .1
            .clone()
    };
    assert_eq!(get("brokerName"), "broker-a");
    assert_eq!(get("listenPort"), node.addr().port().to_string());
    assert_eq!(get("namesrvPort"), node.namesrv_addr().port().to_string());
    assert_eq!(get("shards"), "2");
    assert_eq!(get("autoCreateTopicEnable"), "true");
    assert_eq!(get("flushDiskType"), "ASYNC_FLUSH");
}

#[test]
fn update_broker_config_changes_a_live_key_at_once_and_refuses_others_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (node, mut raw) = start(dir.path());
    let mut namesrv = Raw::connect(node.namesrv_addr());
    let update =
        |text: &str| command(request::UPDATE_BROKER_CONFIG, &[]).with_body(text.to_owned());
    let route = |namesrv: &mut Raw, topic: &str| {
        namesrv
            .call(command(
                request::GET_ROUTEINFO_BY_TOPIC,
                &[("topic", topic)],
            ))
            .code
    };
    assert_eq!(route(&mut namesrv, "AutoMade1"), response::SUCCESS);

    let off = raw.call(update("autoCreateTopicEnable=false\n"));
    assert_eq!(off.code, response::SUCCESS, "{off:?}");
    assert_eq!(route(&mut namesrv, "AutoMade2"), response::TOPIC_NOT_EXIST);
    let version = |raw: &mut Raw| {
        let answer = raw.call(command(request::GET_BROKER_CONFIG, &[]));
        assert!(String::from_utf8_lossy(&answer.body).contains("autoCreateTopicEnable=false"));
        let version: Value = serde_json::from_str(&answer.ext_fields["version"]).unwrap();
        version["counter"].as_i64().unwrap()
    };
    let counter = version(&mut raw);
    assert!(counter >= 1, "{counter}");

    // Not live: refused whole, naming the key, and nothing changes.
    let refused = raw.call(update("autoCreateTopicEnable=true\nfileReservedTime=1\n"));
    assert_eq!(refused.code, response::NO_PERMISSION, "{refused:?}");
    let remark = refused.remark.unwrap();
    assert!(remark.contains("fileReservedTime"), "{remark}");
    assert_eq!(route(&mut namesrv, "AutoMade3"), response::TOPIC_NOT_EXIST);
    assert_eq!(version(&mut raw), counter);
    let bad = raw.call(update("autoCreateSubscriptionGroup=sometimes"));
    assert_eq!(bad.code, response::INVALID_PARAMETER, "{bad:?}");
    assert!(bad.remark.unwrap().contains("autoCreateSubscriptionGroup"));

    let on = raw.call(update("autoCreateTopicEnable=true"));
    assert_eq!(on.code, response::SUCCESS, "{on:?}");
    assert_eq!(route(&mut namesrv, "AutoMade4"), response::SUCCESS);
}

#[test]
fn broker_consume_stats_list_every_subscription_group_with_the_total_lag() {
    let dir = tempfile::tempdir().unwrap();
    let (_node, mut raw) = start(dir.path());
    for queue in 0..QUEUES as i32 {
        for _ in 0..3 {
            send(&mut raw, queue);
        }
    }
    let created = raw.call(
        command(request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, &[])
            .with_body(serde_json::json!({"groupName": GROUP}).to_string()),
    );
    assert_eq!(created.code, response::SUCCESS, "{created:?}");
    commit(&mut raw, GROUP, 0, 1);
    commit(&mut raw, GROUP, 1, 3);
    let answer = raw.call(command(
        request::GET_BROKER_CONSUME_STATS,
        &[("isOrder", "false")],
    ));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    let parsed = ringmq::remoting::fastjson::parse(&answer.body).unwrap();
    assert_eq!(parsed["brokerAddr"], node_addr(&parsed), "{parsed}");
    // Queues 2 and 3 count from 0: 3 + 3; queue 0 lags 2, queue 1 nothing.
    assert_eq!(parsed["totalDiff"], 8, "{parsed}");
    assert_eq!(parsed["totalInflightDiff"], 0, "{parsed}");
    let list = parsed["consumeStatsList"].as_array().unwrap();
    let ours = list
        .iter()
        .find_map(|entry| entry.get(GROUP))
        .unwrap_or_else(|| panic!("{GROUP} missing: {parsed}"));
    let stats = ours.as_array().unwrap();
    assert_eq!(stats.len(), 1, "{parsed}");
    assert_eq!(
        stats[0]["offsetTable"].as_object().unwrap().len(),
        QUEUES as usize
    );
    let ordered = raw.call(command(
        request::GET_BROKER_CONSUME_STATS,
        &[("isOrder", "true")],
    ));
    let parsed = ringmq::remoting::fastjson::parse(&ordered.body).unwrap();
    assert_eq!(parsed["totalDiff"], 0, "only ordered topics: {parsed}");
}

fn node_addr(parsed: &Value) -> Value {
    // The address is the node's own; checked for shape here (host:port).
    let addr = parsed["brokerAddr"].as_str().unwrap();
    assert!(addr.parse::<std::net::SocketAddr>().is_ok(), "{addr}");
    Value::from(addr)
}

#[test]
fn clone_group_offset_gives_the_destination_the_sources_committed_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let (_node, mut raw) = start(dir.path());
    for queue in 0..QUEUES as i32 {
        send(&mut raw, queue);
        send(&mut raw, queue);
    }
    commit(&mut raw, GROUP, 0, 2);
    commit(&mut raw, GROUP, 3, 1);
    commit(&mut raw, "dest-group", 1, 1);
    let answer = raw.call(command(
        request::CLONE_GROUP_OFFSET,
        &[
            ("srcGroup", GROUP),
            ("destGroup", "dest-group"),
            ("topic", TOPIC),
            ("offline", "false"),
        ],
    ));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    assert_eq!(committed(&mut raw, "dest-group", 0), Some(2));
    assert_eq!(committed(&mut raw, "dest-group", 3), Some(1));
    // Replaced as a whole, as Java's cloneOffset does.
    assert_ne!(committed(&mut raw, "dest-group", 1), Some(1));
    // An unknown topic is skipped, still SUCCESS.
    let unknown = raw.call(command(
        request::CLONE_GROUP_OFFSET,
        &[
            ("srcGroup", GROUP),
            ("destGroup", "d2"),
            ("topic", "NoSuchTopic"),
            ("offline", "true"),
        ],
    ));
    assert_eq!(unknown.code, response::SUCCESS, "{unknown:?}");
}

#[test]
fn consumer_running_info_is_relayed_to_the_consumer_and_its_answer_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    options.client_call_timeout = Duration::from_millis(500);
    let node = ringmq::node::start(options).expect("node starts");
    let mut consumer = Raw::connect(node.addr());
    let beat = consumer.call(common::consumer_heartbeat("running@1", GROUP, TOPIC, "*"));
    assert_eq!(beat.code, response::SUCCESS, "{beat:?}");
    let ask = |client: &str| {
        command(
            request::GET_CONSUMER_RUNNING_INFO,
            &[
                ("consumerGroup", GROUP),
                ("clientId", client),
                ("jstackEnable", "false"),
            ],
        )
    };
    let addr = node.addr();
    let admin = std::thread::spawn(move || {
        let mut admin = Raw::connect(addr);
        admin.call(ask("running@1"))
    });
    let relayed = consumer.next(Duration::from_secs(10), |frame| {
        frame.code == request::GET_CONSUMER_RUNNING_INFO && !frame.is_response()
    });
    assert_eq!(relayed.get_str("clientId").unwrap(), "running@1");
    assert_eq!(relayed.get_str("jstackEnable").unwrap(), "false");
    let info = r#"{"jstack":"","properties":{"consumeType":"CONSUME_PASSIVELY"}}"#;
    let mut answer = RemotingCommand::response_to(&relayed, response::SUCCESS, None);
    answer.put_ext("extra", "kept");
    consumer.reply(answer.with_body(info));
    let answered = admin.join().unwrap();
    assert_eq!(answered.code, response::SUCCESS, "{answered:?}");
    assert_eq!(answered.body.as_ref(), info.as_bytes());
    assert_eq!(answered.get_str("extra").unwrap(), "kept");

    let mut admin = Raw::connect(addr);
    let absent = admin.call(ask("nobody@1"));
    assert_eq!(absent.code, response::SYSTEM_ERROR, "{absent:?}");
    assert_eq!(
        absent.remark.as_deref(),
        Some(format!("The Consumer <{GROUP}> <nobody@1> not online").as_str())
    );
    // A consumer that does not answer: Java's CONSUME_MSG_TIMEOUT after the call timeout.
    let silent = admin.call(ask("running@1"));
    assert_eq!(silent.code, 207, "{silent:?}");
    assert!(silent.remark.unwrap().contains("Timeout"));
}

#[test]
fn wipe_and_add_write_perm_take_the_write_bit_off_the_routes_and_give_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let (node, _raw) = start(dir.path());
    let mut namesrv = Raw::connect(node.namesrv_addr());
    assert_eq!(route_perm(&mut namesrv, TOPIC), 6);
    let wipe = namesrv.call(command(
        request::WIPE_WRITE_PERM_OF_BROKER,
        &[("brokerName", "broker-a")],
    ));
    assert_eq!(wipe.code, response::SUCCESS, "{wipe:?}");
    let count: usize = wipe.get_str("wipeTopicCount").unwrap().parse().unwrap();
    assert!(count >= 1, "{wipe:?}");
    assert_eq!(route_perm(&mut namesrv, TOPIC), 4);
    let other = namesrv.call(command(
        request::WIPE_WRITE_PERM_OF_BROKER,
        &[("brokerName", "broker-z")],
    ));
    assert_eq!(other.get_str("wipeTopicCount").unwrap(), "0");
    let add = namesrv.call(command(
        request::ADD_WRITE_PERM_OF_BROKER,
        &[("brokerName", "broker-a")],
    ));
    assert_eq!(add.code, response::SUCCESS, "{add:?}");
    assert_eq!(add.get_str("addTopicCount").unwrap(), count.to_string());
    assert_eq!(route_perm(&mut namesrv, TOPIC), 6);
}

#[test]
fn delete_topic_in_namesrv_succeeds_for_known_and_unknown_topics() {
    let dir = tempfile::tempdir().unwrap();
    let (node, mut raw) = start(dir.path());
    let mut namesrv = Raw::connect(node.namesrv_addr());
    let deleted = raw.call(command(
        request::DELETE_TOPIC_IN_BROKER,
        &[("topic", TOPIC)],
    ));
    assert_eq!(deleted.code, response::SUCCESS, "{deleted:?}");
    for topic in [TOPIC, "NeverThere"] {
        let answer = namesrv.call(command(
            request::DELETE_TOPIC_IN_NAMESRV,
            &[("topic", topic), ("clusterName", "DefaultCluster")],
        ));
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    }
    let topics = json(&namesrv.call(command(request::GET_ALL_TOPIC_LIST_FROM_NAMESERVER, &[])));
    assert!(
        !topics["topicList"]
            .as_array()
            .unwrap()
            .contains(&Value::from(TOPIC)),
        "{topics}"
    );
}

#[test]
fn namesrv_config_is_the_name_servers_settings_as_properties() {
    let dir = tempfile::tempdir().unwrap();
    let (node, _raw) = start(dir.path());
    let mut namesrv = Raw::connect(node.namesrv_addr());
    let settings = properties(&namesrv.call(command(request::GET_NAMESRV_CONFIG, &[])));
    assert!(
        settings.contains(&("listenPort".into(), node.namesrv_addr().port().to_string())),
        "{settings:?}"
    );
}

#[test]
fn topic_consume_by_who_lists_subscribed_groups_and_groups_with_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let (_node, mut raw) = start(dir.path());
    send(&mut raw, 0);
    commit(&mut raw, "committed-group", 0, 1);
    let beat = raw.call(common::consumer_heartbeat(
        "who@1",
        "live-group",
        TOPIC,
        "*",
    ));
    assert_eq!(beat.code, response::SUCCESS, "{beat:?}");
    let ask = |topic: &str| command(request::QUERY_TOPIC_CONSUME_BY_WHO, &[("topic", topic)]);
    let groups = json(&raw.call(ask(TOPIC)));
    assert_eq!(
        groups["groupList"],
        serde_json::json!(["committed-group", "live-group"]),
        "{groups}"
    );
    let none = json(&raw.call(ask("NoSuchTopic")));
    assert_eq!(none["groupList"], serde_json::json!([]), "{none}");
}

#[test]
fn kv_config_reads_find_nothing_and_deletes_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let (node, _raw) = start(dir.path());
    let mut namesrv = Raw::connect(node.namesrv_addr());
    let key = [("namespace", "ORDER_TOPIC_CONFIG"), ("key", TOPIC)];
    let read = namesrv.call(command(request::GET_KV_CONFIG, &key));
    assert_eq!(read.code, response::QUERY_NOT_FOUND, "{read:?}");
    assert_eq!(
        read.remark.as_deref(),
        Some(format!("No config item, Namespace: ORDER_TOPIC_CONFIG Key: {TOPIC}").as_str())
    );
    let deleted = namesrv.call(command(request::DELETE_KV_CONFIG, &key));
    assert_eq!(deleted.code, response::SUCCESS, "{deleted:?}");
}

#[test]
fn broker_stats_data_is_refused_as_java_refuses_an_item_it_does_not_hold() {
    let dir = tempfile::tempdir().unwrap();
    let (_node, mut raw) = start(dir.path());
    let answer = raw.call(command(
        request::VIEW_BROKER_STATS_DATA,
        &[("statsName", "TOPIC_PUT_NUMS"), ("statsKey", TOPIC)],
    ));
    assert_eq!(answer.code, response::SYSTEM_ERROR, "{answer:?}");
    assert_eq!(
        answer.remark.as_deref(),
        Some(format!("The stats <TOPIC_PUT_NUMS> <{TOPIC}> not exist").as_str())
    );
}
