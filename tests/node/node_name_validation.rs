//! Every request that names a topic or a group checks it by the send rules
//! (`^[%|a-zA-Z0-9_-]+$`, topic <= 127, group <= 255): an offset commit for `abuse@topic`
//! or `topic@grp` is refused (so `topic@group` keys cannot become ambiguous), a pull whose
//! commitOffset names queue -5, a queue past the topic's, `../../etc/x` or a bad group
//! stores nothing, heartbeats skip illegal names (registering the rest of the heartbeat)
//! and offset queries refuse them, and the offsets committed survive a restart unchanged.

use crate::common;

use common::{consumer_heartbeat, run_local};
use ringmq::client::{pull_request, queue_request, Client};
use ringmq::node::NodeHandle;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::FLAG_COMMIT_OFFSET;
use ringmq::remoting::{ExtFields, RemotingCommand};

fn node(dir: &std::path::Path) -> NodeHandle {
    common::start_node(dir)
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

fn query(group: &str, topic: &str, queue_id: i32) -> RemotingCommand {
    RemotingCommand::request(
        request::QUERY_CONSUMER_OFFSET,
        fields(group, topic, queue_id),
    )
}

/// The offset table as `consumerOffset.json` holds it after a clean shutdown.
fn offset_file(dir: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("config/consumerOffset.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).unwrap()["offsetTable"].clone()
}

#[test]
fn an_offset_commit_naming_a_topic_or_group_with_an_at_sign_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let first = node(dir.path());
    let addr = first.addr();
    let answers = run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        let long_group = "g".repeat(256);
        let mut answers = Vec::new();
        for (group, topic) in [
            ("grp", "abuse@topic"),
            ("topic@grp", "abuse"),
            ("grp", "../../etc/x"),
            ("", "T"),
            (long_group.as_str(), "T"),
        ] {
            answers.push(client.request(update(group, topic, 0, 5)).await.unwrap());
            answers.push(client.request(query(group, topic, 0)).await.unwrap());
        }
        // A legal pair on the same connection is stored.
        let answer = client.request(update("grp", "abuse", 0, 5)).await.unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        answers
    });
    first.shutdown().unwrap();
    // The file first: an abuse@topic/grp commit would be written as "abuse@topic@grp",
    // which reloads as topic abuse, group topic@grp.
    assert_eq!(
        offset_file(dir.path()),
        serde_json::json!({"abuse@grp": {"0": 5}}),
        "only the legal commit is stored"
    );
    for answer in answers {
        assert_eq!(answer.code, response::INVALID_PARAMETER, "{answer:?}");
        assert!(!answer.remark.unwrap_or_default().is_empty());
    }
}

#[test]
fn a_pull_commit_for_an_illegal_queue_topic_or_group_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path());
    let addr = node.addr();
    let answers = run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        // P gets the default 8 queues.
        let sent = client.send_message("P", 0, b"x", None, None).await.unwrap();
        assert_eq!(sent.code, response::SUCCESS);
        let mut answers = Vec::new();
        for (group, topic, queue_id) in [
            ("ringmq-consumer", "P", -5),
            ("ringmq-consumer", "P", 8),
            ("ringmq-consumer", "../../etc/x", 0),
            ("bad@group", "P", 0),
        ] {
            let mut pull = pull_request(topic, queue_id, 0, 32, None, None);
            pull.put_ext("consumerGroup", group);
            pull.put_ext("sysFlag", FLAG_COMMIT_OFFSET);
            pull.put_ext("commitOffset", 7);
            answers.push(client.request(pull).await.unwrap());
        }
        // The positive control: a legal commit on the same connection is stored.
        let mut pull = pull_request("P", 0, 1, 32, None, None);
        pull.put_ext("sysFlag", FLAG_COMMIT_OFFSET);
        pull.put_ext("commitOffset", 1);
        let answer = client.request(pull).await.unwrap();
        assert_eq!(answer.code, response::PULL_NOT_FOUND, "{answer:?}");
        answers
    });
    node.shutdown().unwrap();
    assert_eq!(
        offset_file(dir.path()),
        serde_json::json!({"P@ringmq-consumer": {"0": 1}}),
        "only the legal commit is stored"
    );
    for answer in answers {
        assert_eq!(answer.code, response::SYSTEM_ERROR, "{answer:?}");
        // Even a refusal carries the fields the Java client unboxes.
        for field in [
            "nextBeginOffset",
            "minOffset",
            "maxOffset",
            "suggestWhichBrokerId",
        ] {
            assert!(
                answer.ext_fields.get(field).is_some(),
                "{field}: {answer:?}"
            );
        }
    }
}

#[test]
fn a_heartbeat_or_offset_query_naming_an_illegal_name_registers_or_stores_nothing_illegal() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path());
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        // As Java's broker does, a heartbeat skips the illegal names and answers SUCCESS.
        for (group, topic) in [("bad@group", "T"), ("g", "../../etc/x"), ("g", "a b")] {
            let answer = client
                .request(consumer_heartbeat("client-1", group, topic, "*"))
                .await
                .unwrap();
            assert_eq!(
                answer.code,
                response::SUCCESS,
                "{group}/{topic}: {answer:?}"
            );
        }
        let answer = client
            .request(consumer_heartbeat("client-1", "g", "T", "*"))
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let mut list = ExtFields::new();
        list.insert("consumerGroup".into(), "bad@group");
        let answer = client
            .request(RemotingCommand::request(
                request::GET_CONSUMER_LIST_BY_GROUP,
                list,
            ))
            .await
            .unwrap();
        assert_ne!(
            answer.code,
            response::SUCCESS,
            "nothing registered: {answer:?}"
        );
        for code in [request::GET_MAX_OFFSET, request::GET_MIN_OFFSET] {
            let answer = client
                .request(queue_request(code, "../../etc/x", 0))
                .await
                .unwrap();
            assert_eq!(answer.code, response::SYSTEM_ERROR, "{answer:?}");
        }
    });
    node.shutdown().unwrap();
}

/// One client process heartbeats all its groups at once: a bad group, or a bad subscription
/// of a good group, must not keep the process's other groups from being registered.
#[test]
fn a_heartbeat_with_one_illegal_group_or_topic_still_registers_the_legal_ones() {
    let dir = tempfile::tempdir().unwrap();
    let node = node(dir.path());
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        // Legal (<= 255), but its own %RETRY% topic is longer than a topic may be.
        let long = "g".repeat(250);
        let consumer = |group: &str, topics: &[&str]| {
            let subs: Vec<_> = topics
                .iter()
                .map(|topic| serde_json::json!({"topic": topic, "subString": "*"}))
                .collect();
            serde_json::json!({"groupName": group, "subscriptionDataSet": subs})
        };
        let body = serde_json::json!({"clientID": "10.0.0.5@7",
        "producerDataSet": [{"groupName": "P1"}, {"groupName": "bad producer"}],
        "consumerDataSet": [
            consumer("good", &["T", "%RETRY%good"]),
            consumer("bad@group", &["T"]),
            consumer("dotted", &["a.b", "T"]),
            consumer(&long, &["T", &format!("%RETRY%{long}")]),
        ]});
        let beat = RemotingCommand::request(request::HEART_BEAT, ExtFields::new())
            .with_body(body.to_string());
        let answer = client.request(beat).await.unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        for group in ["good", "dotted", long.as_str(), "bad@group"] {
            let mut list = ExtFields::new();
            list.insert("consumerGroup".into(), group);
            let answer = client
                .request(RemotingCommand::request(
                    request::GET_CONSUMER_LIST_BY_GROUP,
                    list,
                ))
                .await
                .unwrap();
            if group == "bad@group" {
                assert_eq!(answer.code, response::SYSTEM_ERROR, "{answer:?}");
                continue;
            }
            assert_eq!(answer.code, response::SUCCESS, "{group}: {answer:?}");
            let ids: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
            assert_eq!(
                ids,
                serde_json::json!({"consumerIdList": ["10.0.0.5@7"]}),
                "{group}"
            );
        }
    });
    node.shutdown().unwrap();
}

#[test]
fn committed_offsets_survive_a_restart_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let commits = [
        ("g1", "TopicTest", 0, 5),
        ("g1", "TopicTest", 7, 0),
        ("g2", "TopicTest", 0, 77),
        ("%RETRY%g1", "%RETRY%g1", 0, 3),
        ("a-b|c%d_e", "x_Y-z|1%", 2, 123_456_789_012),
    ];
    let first = node(dir.path());
    let addr = first.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        for (group, topic, queue_id, offset) in commits {
            let answer = client
                .request(update(group, topic, queue_id, offset))
                .await
                .unwrap();
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        }
    });
    first.shutdown().unwrap();
    let written = offset_file(dir.path());

    let second = node(dir.path());
    let addr = second.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        for (group, topic, queue_id, offset) in commits {
            let answer = client.request(query(group, topic, queue_id)).await.unwrap();
            assert_eq!(
                answer.code,
                response::SUCCESS,
                "{group}/{topic}: {answer:?}"
            );
            assert_eq!(
                answer.ext_fields.get("offset").map(|v| v.to_string()),
                Some(offset.to_string()),
                "{group}/{topic}/{queue_id}"
            );
        }
    });
    second.shutdown().unwrap();
    assert_eq!(
        offset_file(dir.path()),
        written,
        "a restart changed the table"
    );
}
