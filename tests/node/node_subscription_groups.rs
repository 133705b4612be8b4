//! Subscription groups on a node: a heartbeat creates its group with RocketMQ's defaults;
//! UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) replaces it (and a disabled group's pulls are
//! NO_PERMISSION); GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) lists the table, which survives
//! a restart in `config/subscriptionGroup.json`; DELETE_SUBSCRIPTIONGROUP (207) removes it,
//! with `cleanOffset` its committed offsets too. With `autoCreateSubscriptionGroup` off a
//! pull of an unknown group is SUBSCRIPTION_GROUP_NOT_EXIST and a heartbeat creates
//! nothing. Bad bodies and names are refused naming the problem.

use crate::common;

use common::command;
use common::raw::Raw;
use ringmq::node_config::NodeConfig;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::{pull_request, send_request_v1};
use ringmq::remoting::RemotingCommand;
use serde_json::{json, Value};

const TOPIC: &str = "Grouped";
const GROUP: &str = "configured-group";

fn start(dir: &std::path::Path, auto_create: bool) -> ringmq::node::NodeHandle {
    let mut options: NodeConfig = common::node_config(dir);
    options.auto_create_subscription_group = auto_create;
    ringmq::node::start(options).expect("node starts")
}

fn groups(raw: &mut Raw) -> Value {
    let answer = raw.call(command(request::GET_ALL_SUBSCRIPTIONGROUP_CONFIG, &[]));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    serde_json::from_slice(&answer.body).unwrap()
}

fn update(raw: &mut Raw, body: &Value) -> RemotingCommand {
    raw.call(
        RemotingCommand::request(
            request::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            Default::default(),
        )
        .with_body(body.to_string()),
    )
}

fn pull(raw: &mut Raw, group: &str) -> RemotingCommand {
    let mut pull = pull_request(TOPIC, 0, 0, 8, None, None);
    pull.ext_fields.insert("consumerGroup".into(), group);
    raw.call(pull)
}

fn bad_updates_are_refused_naming_the_field(raw: &mut Raw) {
    // Bad input.
    for (body, expected) in [
        (
            json!({"groupName": GROUP, "retryMaxTimes": -1}),
            "retryMaxTimes",
        ),
        (
            json!({"groupName": GROUP, "retryQueueNums": 0}),
            "retryQueueNums",
        ),
        (json!({"groupName": "bad group"}), "group"),
        (json!({"retryMaxTimes": 3}), "groupName"),
    ] {
        let answer = update(raw, &body);
        assert_eq!(answer.code, response::SYSTEM_ERROR, "{body}: {answer:?}");
        let remark = answer.remark.unwrap_or_default();
        assert!(remark.contains(expected), "{body}: {remark}");
    }
}

fn delete_with_clean_offset_removes_the_group_and_its_offsets(raw: &mut Raw) {
    // 207 with cleanOffset: the group and its offsets go.
    let commit = raw.call(command(
        request::UPDATE_CONSUMER_OFFSET,
        &[
            ("consumerGroup", GROUP),
            ("topic", TOPIC),
            ("queueId", "0"),
            ("commitOffset", "1"),
        ],
    ));
    assert_eq!(commit.code, response::SUCCESS, "{commit:?}");
    let answer = raw.call(command(
        request::DELETE_SUBSCRIPTIONGROUP,
        &[("groupName", GROUP), ("cleanOffset", "true")],
    ));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    let table = groups(raw);
    assert!(
        table["subscriptionGroupTable"].get(GROUP).is_none(),
        "{table}"
    );
    // setZeroIfNotFound=false asks for the stored offset only (without it a queue whose
    // first message is in memory answers 0 for any group).
    let offset = raw.call(command(
        request::QUERY_CONSUMER_OFFSET,
        &[
            ("consumerGroup", GROUP),
            ("topic", TOPIC),
            ("queueId", "0"),
            ("setZeroIfNotFound", "false"),
        ],
    ));
    assert_ne!(
        offset.code,
        response::SUCCESS,
        "the offsets went: {offset:?}"
    );
    // Deleting again is still SUCCESS, as Java answers.
    let again = raw.call(command(
        request::DELETE_SUBSCRIPTIONGROUP,
        &[("groupName", GROUP)],
    ));
    assert_eq!(again.code, response::SUCCESS, "{again:?}");
}

#[test]
fn groups_are_created_configured_listed_persisted_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), true);
    let mut raw = Raw::connect(node.addr());
    let sent = raw.call(send_request_v1(TOPIC, 0, b"m", None, None));
    assert_eq!(sent.code, response::SUCCESS, "{sent:?}");

    // A heartbeat creates the group with RocketMQ's defaults.
    let beat = raw.call(common::consumer_heartbeat("c@1", GROUP, TOPIC, "*"));
    assert_eq!(beat.code, response::SUCCESS, "{beat:?}");
    let table = groups(&mut raw);
    let config = &table["subscriptionGroupTable"][GROUP];
    assert_eq!(config["groupName"], GROUP, "{table}");
    assert_eq!(config["retryMaxTimes"], 16);
    assert_eq!(config["retryQueueNums"], 1);
    assert_eq!(config["consumeEnable"], true);
    assert_eq!(pull(&mut raw, GROUP).code, response::SUCCESS);

    // 200 replaces it, keeping fields the node does not know; a disabled group cannot pull.
    let answer = update(
        &mut raw,
        &json!({"groupName": GROUP, "consumeEnable": false, "retryMaxTimes": 3,
                "groupRetryPolicy": {"type": "CUSTOMIZED"}}),
    );
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    let refused = pull(&mut raw, GROUP);
    assert_eq!(refused.code, response::NO_PERMISSION, "{refused:?}");
    assert!(refused.remark.as_deref().unwrap().contains(GROUP));

    bad_updates_are_refused_naming_the_field(&mut raw);
    let answer = raw.call(command(request::DELETE_SUBSCRIPTIONGROUP, &[]));
    assert_ne!(answer.code, response::SUCCESS, "no groupName: {answer:?}");

    // The table survives a restart.
    drop(raw);
    node.shutdown().unwrap();
    let node = start(dir.path(), true);
    let mut raw = Raw::connect(node.addr());
    let table = groups(&mut raw);
    let config = &table["subscriptionGroupTable"][GROUP];
    assert_eq!(config["consumeEnable"], false, "{table}");
    assert_eq!(config["retryMaxTimes"], 3);
    assert_eq!(config["groupRetryPolicy"]["type"], "CUSTOMIZED");
    assert_eq!(pull(&mut raw, GROUP).code, response::NO_PERMISSION);

    delete_with_clean_offset_removes_the_group_and_its_offsets(&mut raw);
    node.shutdown().unwrap();
}

#[test]
fn without_auto_creation_an_unknown_group_cannot_pull_until_it_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), false);
    let mut raw = Raw::connect(node.addr());
    let beat = raw.call(common::consumer_heartbeat("c@1", GROUP, TOPIC, "*"));
    assert_eq!(beat.code, response::SUCCESS, "{beat:?}");
    let table = groups(&mut raw);
    assert!(
        table["subscriptionGroupTable"].get(GROUP).is_none(),
        "{table}"
    );
    let refused = pull(&mut raw, GROUP);
    assert_eq!(
        refused.code,
        response::SUBSCRIPTION_GROUP_NOT_EXIST,
        "{refused:?}"
    );
    let answer = update(&mut raw, &json!({"groupName": GROUP}));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    let allowed = pull(&mut raw, GROUP);
    assert_ne!(
        allowed.code,
        response::SUBSCRIPTION_GROUP_NOT_EXIST,
        "{allowed:?}"
    );
    node.shutdown().unwrap();
}

#[test]
fn a_corrupt_subscription_group_file_stops_the_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config").join("subscriptionGroup.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        &path,
        r#"{"subscriptionGroupTable":{"g":{"groupName":"g","retryMaxTimes":-5}}}"#,
    )
    .unwrap();
    let error = ringmq::node::start(common::node_config(dir.path()))
        .err()
        .expect("the start is refused")
        .to_string();
    assert!(error.contains("subscriptionGroup.json"), "{error}");
    assert!(error.contains("retryMaxTimes"), "{error}");
}
