//! QUERY_MESSAGE (12) and VIEW_MESSAGE_BY_ID (33) on a node of two shards: a key finds
//! its messages whichever shard stored them, `maxNum` caps the merged answer, a unique-key
//! query finds the message by the id the send returned, a time range outside the
//! messages finds nothing (QUERY_NOT_FOUND, still with the index header fields), and an
//! offsetMsgId views its record on the shard its offset names, while an offset that does
//! not start a record, or names no shard, is SYSTEM_ERROR. After a clean restart the same
//! queries answer the same.

use crate::common;

use std::collections::BTreeSet;

use common::{pull_records, run_local};
use ringmq::broker::naming::ids::decode_offset_msg_id;
use ringmq::client::{send_request_v1, Client};
use ringmq::node::NodeHandle;
use ringmq::node_config::NodeConfig;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::{ExtFields, RemotingCommand};
use ringmq::store::properties;

const TOPIC: &str = "Findable";
const QUEUES: i32 = 8;
const MESSAGES: usize = 40;

fn options(dir: &std::path::Path) -> NodeConfig {
    let mut options = common::node_config(dir);
    options.shards = 2;
    options
}

fn ext<'a>(cmd: &'a RemotingCommand, field: &str) -> &'a str {
    cmd.ext_fields
        .get(field)
        .unwrap_or_else(|| panic!("no {field} in {cmd:?}"))
}

fn query(key: &str, max: i32, begin: i64, end: i64, unique: bool) -> RemotingCommand {
    let mut fields = ExtFields::new();
    fields.insert("topic".into(), TOPIC);
    fields.insert("key".into(), key);
    fields.insert("maxNum".into(), max.to_string());
    fields.insert("beginTimestamp".into(), begin.to_string());
    fields.insert("endTimestamp".into(), end.to_string());
    if unique {
        fields.insert("_UNIQUE_KEY_QUERY".into(), "true");
    }
    RemotingCommand::request(request::QUERY_MESSAGE, fields)
}

fn view(offset: i64) -> RemotingCommand {
    let mut fields = ExtFields::new();
    fields.insert("offset".into(), offset.to_string());
    fields.insert("topic".into(), TOPIC);
    RemotingCommand::request(request::VIEW_MESSAGE_BY_ID, fields)
}

/// What a send returned for message `i`.
struct Sent {
    body: String,
    phys: u64,
    uniq: String,
}

/// Message `i` has keys `k{i}` and `shared`.
async fn send_all(client: &Client) -> Vec<Sent> {
    let mut sent = Vec::new();
    for i in 0..MESSAGES {
        let body = format!("message {i}");
        let keys = format!("k{i} shared");
        let answer = client
            .request(send_request_v1(
                TOPIC,
                i as i32 % QUEUES,
                body.as_bytes(),
                Some("T"),
                Some(&keys),
            ))
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let (_, phys) = decode_offset_msg_id(ext(&answer, "msgId")).unwrap();
        sent.push(Sent {
            body,
            phys,
            uniq: ext(&answer, "transactionId").to_string(),
        });
    }
    let shards: BTreeSet<u64> = sent.iter().map(|s| s.phys >> 56).collect();
    assert_eq!(shards.len(), 2, "both shards store some of the messages");
    sent
}

/// The bodies of an answer's records whose KEYS hold `key`, and how many records it had.
fn bodies_with_key(answer: &RemotingCommand, key: &str) -> (BTreeSet<String>, usize) {
    let records = pull_records(&answer.body);
    let with_key = records
        .iter()
        .filter(|r| {
            properties::get(r.properties, properties::KEYS)
                .is_some_and(|keys| keys.split(' ').any(|k| k == key))
        })
        .map(|r| String::from_utf8(r.body.to_vec()).unwrap())
        .collect();
    (with_key, records.len())
}

async fn check_queries(client: &Client, sent: &[Sent]) {
    let now = i64::MAX;
    for (i, message) in sent.iter().enumerate() {
        let key = format!("k{i}");
        let answer = client
            .request(query(&key, 32, 0, now, false))
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS, "key {key}: {answer:?}");
        let (found, _) = bodies_with_key(&answer, &key);
        assert_eq!(found, BTreeSet::from([message.body.clone()]), "key {key}");
        ext(&answer, "indexLastUpdateTimestamp");
        ext(&answer, "indexLastUpdatePhyoffset");
    }

    // The shared key: the merged answer is capped by maxNum, and by 64 whatever is asked.
    let answer = client
        .request(query("shared", 5, 0, now, false))
        .await
        .unwrap();
    assert_eq!(answer.code, response::SUCCESS);
    let (found, records) = bodies_with_key(&answer, "shared");
    assert_eq!((found.len(), records), (5, 5), "maxNum 5 over two shards");
    let answer = client
        .request(query("shared", 1000, 0, now, false))
        .await
        .unwrap();
    let (found, _) = bodies_with_key(&answer, "shared");
    let all: BTreeSet<String> = sent.iter().map(|s| s.body.clone()).collect();
    assert_eq!(found, all, "{MESSAGES} fit under the cap of 64");
    let phys: Vec<u64> = pull_records(&answer.body)
        .iter()
        .map(|r| r.phys_offset as u64)
        .collect();
    assert!(phys.windows(2).all(|w| w[0] < w[1]), "in CommitLog order");

    // By the unique key the send answered with.
    let message = &sent[7];
    let answer = client
        .request(query(&message.uniq, 1, 0, now, true))
        .await
        .unwrap();
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    let records = pull_records(&answer.body);
    assert!(records.iter().any(|r| {
        properties::get(r.properties, properties::UNIQ_KEY) == Some(message.uniq.as_str())
            && r.body == message.body.as_bytes()
    }));

    // Nothing: an unknown key, a time range before every message, maxNum 0.
    for (what, request) in [
        ("an unknown key", query("nope", 32, 0, now, false)),
        ("a range in 1970", query("shared", 32, 0, 1_000, false)),
        ("maxNum 0", query("shared", 0, 0, now, false)),
        ("begin after end", query("shared", 32, now, 0, false)),
    ] {
        let answer = client.request(request).await.unwrap();
        assert_eq!(answer.code, response::QUERY_NOT_FOUND, "{what}: {answer:?}");
        assert!(answer.body.is_empty(), "{what}");
        ext(&answer, "indexLastUpdateTimestamp");
    }

    // A header without maxNum is refused, naming the field.
    let mut broken = query("shared", 1, 0, now, false);
    broken.ext_fields.remove("maxNum");
    let answer = client.request(broken).await.unwrap();
    assert_ne!(answer.code, response::SUCCESS);
    assert!(
        answer.remark.as_deref().unwrap_or("").contains("maxNum"),
        "{answer:?}"
    );
}

async fn check_views(client: &Client, sent: &[Sent]) {
    for message in sent {
        let answer = client.request(view(message.phys as i64)).await.unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let records = pull_records(&answer.body);
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].body, message.body.as_bytes());
        assert_eq!(records[0].phys_offset as u64, message.phys);
    }
    let inside = sent[3].phys as i64 + 1;
    let beyond = sent.iter().map(|s| s.phys).max().unwrap() as i64 + 1_000_000;
    for (what, offset) in [
        ("inside a record", inside),
        ("past the log", beyond),
        ("a shard that does not exist", 5 << 56),
        ("a negative offset", -1),
    ] {
        let answer = client.request(view(offset)).await.unwrap();
        assert_eq!(answer.code, response::SYSTEM_ERROR, "{what}: {answer:?}");
        assert!(answer.body.is_empty(), "{what}");
    }
}

fn start(dir: &std::path::Path) -> NodeHandle {
    ringmq::node::start(options(dir)).expect("node starts")
}

#[test]
fn messages_are_found_by_key_unique_key_and_offset_id_across_shards_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path());
    let addr = node.addr();
    let sent = run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        let sent = send_all(&client).await;
        check_queries(&client, &sent).await;
        check_views(&client, &sent).await;
        sent
    });
    // Every query and view was timed, on the shard that received it.
    let text = node.metrics().render();
    let timed: u64 = text
        .lines()
        .filter(|line| {
            line.starts_with("ringmq_request_latency_seconds_count{")
                && line.contains("family=\"query\"")
        })
        .map(|line| line.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    let asked = MESSAGES as u64 + 2 + 1 + 4 + 1 + MESSAGES as u64 + 4;
    assert_eq!(timed, asked, "query and view latencies recorded:\n{text}");
    node.shutdown().unwrap();

    let node = start(dir.path());
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        check_queries(&client, &sent).await;
        check_views(&client, &sent).await;
    });
    node.shutdown().unwrap();
}

#[test]
fn a_query_past_the_cap_of_64_returns_64() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path());
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        for i in 0..70 {
            let answer = client
                .request(send_request_v1(
                    TOPIC,
                    i % QUEUES,
                    format!("many {i}").as_bytes(),
                    None,
                    Some("many"),
                ))
                .await
                .unwrap();
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        }
        let answer = client
            .request(query("many", 1000, 0, i64::MAX, false))
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS);
        let (found, records) = bodies_with_key(&answer, "many");
        assert_eq!(
            (found.len(), records),
            (64, 64),
            "maxNum 1000 is capped at 64"
        );
    });
    node.shutdown().unwrap();
}
