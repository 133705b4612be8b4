//! `ringmq admin` against a real `ringmq serve` process: every command, its JSON and (for
//! a few) its human output, and its exit code: 0 done, 1 not found (unknown topic, group,
//! message), 2 bad input (found before any request: those cases point at addresses where
//! nothing listens, so a request would have been exit 3; the exit 2s that need the node
//! are `topic-create` and `group-create` of one that exists, after the one request that
//! lists them, and an address that is the wrong thing: a broker given as the name server,
//! a name server or an HTTP port given as the broker), 3 the node unreachable, silent or
//! failing. Errors are one line on stderr with nothing on stdout. Every run has
//! NAMESRV_ADDR removed from its environment unless a test sets it.
//! A fake name server that answers cluster info in Java's fastjson form (unquoted
//! broker-id keys), listing one broker that does not answer, checks `cluster`'s partial
//! failure and broker discovery; fake brokers check how query-id reads SYSTEM_ERROR and
//! what query-offset's pull carries.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::serve::serve_command;
use common::{consumer_heartbeat, run_local};
use ringmq::client::{send_request_v1, Client};
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::{ExtFields, RemotingCommand};
use ringmq::tools::admin::time::format_utc;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_ringmq");
/// Nothing listens on port 1 of the loopback address: a connection there is refused.
const NOWHERE: &str = "127.0.0.1:1";

/// A `ringmq serve` process on free ports in a directory of its own; killed when dropped.
struct Node {
    child: Child,
    addr: SocketAddr,
    namesrv: SocketAddr,
    /// The Prometheus endpoint (HTTP).
    metrics: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Node {
    fn start(shards: u8) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let shards = shards.to_string();
        let mut child = serve_command(
            dir.path(),
            0,
            &["--segment-size", "8388608", "--shards", &shards],
        )
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
        // Lines arrive through a channel so the wait for them is bounded; the thread keeps
        // draining stderr afterwards so the node never blocks on a full pipe.
        let stderr = child.stderr.take().unwrap();
        let (lines, received) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                let _ = lines.send(line);
            }
        });
        let (mut addr, mut namesrv, mut metrics) = (None, None, None);
        while addr.is_none() || namesrv.is_none() || metrics.is_none() {
            let line = received
                .recv_timeout(Duration::from_secs(30))
                .expect("serve prints its addresses within 30 s");
            // The printed addresses are the bound ones (`0.0.0.0`); clients are told
            // 127.0.0.1 (brokerIP1's default) and the port.
            let loopback = |rest: &str| {
                let bound: std::net::SocketAddr = rest.trim().parse().unwrap();
                std::net::SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), bound.port())
            };
            if let Some(rest) = line.strip_prefix("ringmq: listening on ") {
                addr = Some(loopback(rest));
            }
            if let Some(rest) = line.strip_prefix("ringmq: name server listening on ") {
                namesrv = Some(loopback(rest));
            }
            if let Some(rest) = line.strip_prefix("ringmq: metrics on http://") {
                metrics = Some(loopback(rest.trim_end_matches("/metrics")));
            }
        }
        Node {
            child,
            addr: addr.unwrap(),
            namesrv: namesrv.unwrap(),
            metrics: metrics.unwrap(),
            _dir: dir,
        }
    }

    /// `ringmq admin` with this node's name server and broker.
    fn admin(&self, args: &[&str]) -> Run {
        let mut all = vec![
            "--namesrv".to_string(),
            self.namesrv.to_string(),
            "--broker".to_string(),
            self.addr.to_string(),
        ];
        all.extend(args.iter().map(|a| a.to_string()));
        admin(&all)
    }

    /// [`Node::admin`] with `--json`, expecting exit 0 and a JSON document.
    fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let run = self.admin(&all);
        assert_eq!(run.code, 0, "{args:?}: {run:?}");
        serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {run:?}"))
    }

    /// `ringmq admin` with `--json`, expecting `code`, nothing on stdout and one error line.
    fn fails(&self, code: i32, args: &[&str]) -> String {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let run = self.admin(&all);
        run.failed(code, args)
    }
}

#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Asserts this run failed with `code` the way every failure must look; returns the line.
    fn failed(&self, code: i32, what: &[&str]) -> String {
        assert_eq!(self.code, code, "{what:?}: {self:?}");
        assert_eq!(self.stdout, "", "{what:?}: nothing on stdout");
        assert_eq!(
            self.stderr.lines().count(),
            1,
            "{what:?}: one line: {self:?}"
        );
        assert!(
            self.stderr.starts_with("ringmq admin: "),
            "{what:?}: {self:?}"
        );
        self.stderr.clone()
    }
}

fn admin(args: &[String]) -> Run {
    admin_env(None, args)
}

/// `ringmq admin` with NAMESRV_ADDR set to `namesrv_addr`, or removed.
fn admin_env(namesrv_addr: Option<&str>, args: &[String]) -> Run {
    let mut command = Command::new(BIN);
    command
        .arg("admin")
        .args(args)
        .env_remove("RINGMQ_LOG")
        .env_remove("NAMESRV_ADDR");
    if let Some(value) = namesrv_addr {
        command.env("NAMESRV_ADDR", value);
    }
    let output = command.output().unwrap();
    Run {
        code: output.status.code().expect("exited, not killed"),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// `ringmq admin` pointed at addresses where nothing listens.
fn admin_nowhere(args: &[&str]) -> Run {
    let mut all = vec!["--namesrv", NOWHERE, "--broker", NOWHERE];
    all.extend_from_slice(args);
    admin(&all.iter().map(|a| a.to_string()).collect::<Vec<_>>())
}

/// What a send answered.
struct Sent {
    msg_id: String,
    uniq: String,
}

fn ext(cmd: &RemotingCommand, field: &str) -> String {
    cmd.ext_fields
        .get(field)
        .unwrap_or_else(|| panic!("no {field} in {cmd:?}"))
        .to_string()
}

/// Sends `(queue, body, keys)` messages, tag `TagA`, in order.
fn send(node: &Node, topic: &str, messages: &[(i32, Vec<u8>, Option<&str>)]) -> Vec<Sent> {
    let addr = node.addr;
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        let mut sent = Vec::new();
        for (queue, body, keys) in messages {
            let answer = client
                .request(send_request_v1(topic, *queue, body, Some("TagA"), *keys))
                .await
                .unwrap();
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
            sent.push(Sent {
                msg_id: ext(&answer, "msgId"),
                uniq: ext(&answer, "transactionId"),
            });
        }
        sent
    })
}

/// Commits `offset` for `group` on each `(queue, offset)`.
fn commit(node: &Node, group: &str, topic: &str, offsets: &[(i32, i64)]) {
    let addr = node.addr;
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        for (queue, offset) in offsets {
            let mut fields = ExtFields::new();
            fields.insert("consumerGroup".into(), group);
            fields.insert("topic".into(), topic);
            fields.insert("queueId".into(), queue.to_string());
            fields.insert("commitOffset".into(), offset.to_string());
            let answer = client
                .request(RemotingCommand::request(
                    request::UPDATE_CONSUMER_OFFSET,
                    fields,
                ))
                .await
                .unwrap();
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        }
    })
}

fn create_topic(node: &Node, topic: &str, queues: u32) {
    let queues = queues.to_string();
    let created = node.json(&[
        "topic-create",
        "--topic",
        topic,
        "--read-queues",
        &queues,
        "--write-queues",
        &queues,
    ]);
    assert_eq!(created["action"], "created");
}

fn queue(queues: &Value, id: i64) -> &Value {
    queues
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queueId"] == id)
        .unwrap_or_else(|| panic!("no queue {id} in {queues}"))
}

fn topic_names(list: &Value) -> Vec<String> {
    list["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn topic_commands_create_update_list_route_and_delete() {
    let node = Node::start(1);
    create_topic(&node, "Orders", 4);
    let line = node.fails(2, &["topic-create", "--topic", "Orders"]);
    assert!(line.contains("exists already"), "{line}");

    let updated = node.json(&["topic-update", "--topic", "Orders", "--write-queues", "2"]);
    assert_eq!(updated["topic"]["readQueueNums"], 4, "kept: {updated}");
    assert_eq!(updated["topic"]["writeQueueNums"], 2, "{updated}");
    assert_eq!(updated["topic"]["perm"], 6, "kept: {updated}");
    node.fails(1, &["topic-update", "--topic", "Missing", "--perm", "4"]);

    // From the broker's table: every entry's settings come along.
    let listed = node.json(&["topics"]);
    assert_eq!(listed["source"], "broker");
    assert!(
        topic_names(&listed).contains(&"Orders".to_string()),
        "{listed}"
    );
    let orders = listed["configs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["topicName"] == "Orders")
        .unwrap();
    assert_eq!(orders["writeQueueNums"], 2);
    // From the name server (no --broker).
    let run = admin(&[
        "--json".into(),
        "--namesrv".into(),
        node.namesrv.to_string(),
        "topics".into(),
    ]);
    assert_eq!(run.code, 0, "{run:?}");
    let listed: Value = serde_json::from_str(&run.stdout).unwrap();
    assert!(
        topic_names(&listed).contains(&"Orders".to_string()),
        "{listed}"
    );

    let route = node.json(&["topic-route", "--topic", "Orders"]);
    let broker = &route["route"]["brokerDatas"][0];
    assert_eq!(broker["brokerAddrs"]["0"], node.addr.to_string(), "{route}");
    assert_eq!(
        route["route"]["queueDatas"][0]["writeQueueNums"], 2,
        "{route}"
    );
    let human = node.admin(&["topic-route", "--topic", "Orders"]);
    assert_eq!(human.code, 0);
    assert!(human.stdout.contains(&node.addr.to_string()), "{human:?}");

    // Asking for the route of an unknown topic does not create it (autoCreateTopicEnable
    // is on by default).
    node.fails(1, &["topic-route", "--topic", "Missing"]);
    assert!(!topic_names(&node.json(&["topics"])).contains(&"Missing".to_string()));

    let deleted = node.json(&["topic-delete", "--topic", "Orders"]);
    assert_eq!(deleted["action"], "deleted");
    assert!(!topic_names(&node.json(&["topics"])).contains(&"Orders".to_string()));
    node.fails(1, &["topic-delete", "--topic", "Orders"]);
}

#[test]
fn topic_status_shows_each_queue() {
    let node = Node::start(1);
    create_topic(&node, "Stats", 3);
    let messages: Vec<(i32, Vec<u8>, Option<&str>)> = [0, 0, 0, 1, 1]
        .iter()
        .map(|&q| (q, b"m".to_vec(), None))
        .collect();
    send(&node, "Stats", &messages);
    let status = node.json(&["topic-status", "--topic", "Stats"]);
    let queues = &status["queues"];
    assert_eq!(queues.as_array().unwrap().len(), 3, "{status}");
    for (id, max) in [(0, 3), (1, 2), (2, 0)] {
        let q = queue(queues, id);
        assert_eq!(
            (q["minOffset"].as_i64(), q["maxOffset"].as_i64()),
            (Some(0), Some(max)),
            "{q}"
        );
    }
    let last = queue(queues, 0)["lastUpdateTimestamp"].as_i64().unwrap();
    assert!(last > 1_700_000_000_000, "{status}");
    let human = node.admin(&["topic-status", "--topic", "Stats"]);
    assert_eq!(human.code, 0, "{human:?}");
    // The time is UTC and readable: the day and the minute of the last update.
    assert!(human.stdout.contains(&format_utc(last)[..16]), "{human:?}");
    assert!(human.stdout.contains("last update (UTC)"), "{human:?}");

    node.fails(1, &["topic-status", "--topic", "Missing"]);
}

#[test]
fn cluster_and_broker_status() {
    let node = Node::start(1);
    let cluster = node.json(&["cluster"]);
    let brokers = cluster["brokers"].as_array().unwrap();
    assert_eq!(brokers.len(), 1, "{cluster}");
    assert_eq!(brokers[0]["addr"], node.addr.to_string());
    assert_eq!(brokers[0]["brokerId"], 0);
    assert!(
        brokers[0]["runtime"]["brokerVersionDesc"].is_string(),
        "{cluster}"
    );
    let human = node.admin(&["cluster"]);
    assert_eq!(human.code, 0, "{human:?}");
    let row = human.stdout.lines().nth(1).unwrap();
    assert!(
        row.contains("broker-a") && row.contains(&node.addr.to_string()),
        "{human:?}"
    );

    // No --broker: the name server's cluster info names it.
    let run = admin(&[
        "--json".into(),
        "--namesrv".into(),
        node.namesrv.to_string(),
        "broker-status".into(),
    ]);
    assert_eq!(run.code, 0, "{run:?}");
    let status: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(status["broker"], node.addr.to_string());
    let table = status["table"].as_object().unwrap();
    assert!(!table.is_empty());
    assert!(table.values().all(Value::is_string), "{status}");
    // Human form: one sorted row per key under the header.
    let human = node.admin(&["broker-status"]);
    assert_eq!(human.code, 0);
    let keys: Vec<&str> = human
        .stdout
        .lines()
        .skip(1)
        .map(|line| line.split_whitespace().next().unwrap())
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    assert_eq!(keys.len(), table.len());
}

/// query-key: one key, a key every message shares, time windows, unknowns.
fn query_by_key(node: &Node, sent: &[Sent]) {
    let found = node.json(&["query-key", "--topic", "Findable", "--key", "k3"]);
    let list = found["messages"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{found}");
    assert_eq!(list[0]["body"], "message 3");
    assert_eq!(list[0]["queueId"], 3);
    assert_eq!(list[0]["queueOffset"], 0);
    assert_eq!(list[0]["keys"], "k3 shared");
    assert_eq!(list[0]["tags"], "TagA");
    assert_eq!(list[0]["offsetMsgId"], sent[3].msg_id);
    assert_eq!(list[0]["uniqKey"], sent[3].uniq);
    let all = node.json(&["query-key", "--topic", "Findable", "--key", "shared"]);
    assert_eq!(all["messages"].as_array().unwrap().len(), 8, "{all}");
    // A window that ends before the messages finds nothing.
    node.fails(
        1,
        &[
            "query-key",
            "--topic",
            "Findable",
            "--key",
            "shared",
            "--end",
            "2000-01-01T00:00:00Z",
        ],
    );
    let windowed = node.json(&[
        "query-key",
        "--topic",
        "Findable",
        "--key",
        "k2",
        "--begin",
        "2000-01-01T00:00:00Z",
        "--end",
        "now",
    ]);
    assert_eq!(windowed["messages"].as_array().unwrap().len(), 1);
    node.fails(1, &["query-key", "--topic", "Findable", "--key", "nope"]);
    node.fails(1, &["query-key", "--topic", "Unknown", "--key", "k1"]);
}

fn query_by_unique_key(node: &Node, sent: &[Sent]) {
    let by_uniq = node.json(&["query-uniq", "--topic", "Findable", "--id", &sent[5].uniq]);
    let list = by_uniq["messages"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{by_uniq}");
    assert_eq!(list[0]["body"], "message 5");
    node.fails(
        1,
        &[
            "query-uniq",
            "--topic",
            "Findable",
            "--id",
            "0123456789ABCDEF0123456789ABCDEF",
        ],
    );
    node.fails(
        1,
        &["query-uniq", "--topic", "Unknown", "--id", &sent[5].uniq],
    );
}

fn query_by_offset_msg_id(node: &Node, sent: &[Sent], long: &str) {
    // By offsetMsgId: the store host comes from the id. No --broker, and a name server
    // where nothing listens, so neither names the node: only the id's host can.
    let run = admin(&[
        "--json".into(),
        "--namesrv".into(),
        NOWHERE.into(),
        "query-id".into(),
        "--id".into(),
        sent[6].msg_id.clone(),
    ]);
    assert_eq!(run.code, 0, "{run:?}");
    let by_id: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(by_id["messages"][0]["body"], "message 6");
    assert_eq!(by_id["messages"][0]["offsetMsgId"], sent[6].msg_id);
    // The human form cuts a long body and says when a body is not text.
    let human = node.admin(&["query-id", "--id", &sent[0].msg_id]);
    assert_eq!(human.code, 0, "{human:?}");
    assert!(
        human.stdout.contains(&format!("{}...", &long[..200])),
        "{human:?}"
    );
    assert!(!human.stdout.contains(long), "{human:?}");
    assert!(human.stdout.contains("body size:"), "{human:?}");
    let binary = node.admin(&["query-id", "--id", &sent[7].msg_id]);
    assert!(binary.stdout.contains("(not UTF-8)"), "{binary:?}");
    let full = node.json(&["query-id", "--id", &sent[0].msg_id]);
    assert_eq!(full["messages"][0]["body"], long, "JSON has the whole body");
    // An id whose offset starts no record: not found.
    let (host, phys) = ringmq::broker::naming::ids::decode_offset_msg_id(&sent[6].msg_id).unwrap();
    let inside = ringmq::broker::naming::ids::offset_msg_id(host, phys + 1);
    node.fails(1, &["query-id", "--id", &inside]);
}

fn query_by_queue_offset(node: &Node) {
    // By queue offset: message 6 is the second of queue 2.
    let at = node.json(&[
        "query-offset",
        "--topic",
        "Findable",
        "--queue",
        "2",
        "--offset",
        "1",
    ]);
    assert_eq!(at["messages"][0]["body"], "message 6", "{at}");
    assert_eq!(at["messages"][0]["queueOffset"], 1);
    let line = node.fails(
        1,
        &[
            "query-offset",
            "--topic",
            "Findable",
            "--queue",
            "2",
            "--offset",
            "2",
        ],
    );
    assert!(line.contains("offsets 0 to 1"), "{line}");
    node.fails(
        1,
        &[
            "query-offset",
            "--topic",
            "Findable",
            "--queue",
            "9",
            "--offset",
            "0",
        ],
    );
    node.fails(
        1,
        &[
            "query-offset",
            "--topic",
            "Unknown",
            "--queue",
            "0",
            "--offset",
            "0",
        ],
    );
}

#[test]
fn message_queries_by_key_unique_key_id_and_offset() {
    let node = Node::start(2);
    create_topic(&node, "Findable", 4);
    let long = "x".repeat(500);
    let mut messages: Vec<(i32, Vec<u8>, String)> = (0..8)
        .map(|i| {
            (
                i % 4,
                format!("message {i}").into_bytes(),
                format!("k{i} shared"),
            )
        })
        .collect();
    messages[0].1 = long.clone().into_bytes();
    messages[7].1 = vec![0xff, 0xfe, 0xfd];
    let with_keys: Vec<(i32, Vec<u8>, Option<&str>)> = messages
        .iter()
        .map(|(q, b, k)| (*q, b.clone(), Some(k.as_str())))
        .collect();
    let sent = send(&node, "Findable", &with_keys);

    query_by_key(&node, &sent);

    query_by_unique_key(&node, &sent);

    query_by_offset_msg_id(&node, &sent, &long);

    query_by_queue_offset(&node);
}

/// consumer-progress of a group that committed 2 of 5 on queue 0 and all 3 of queue 1.
fn progress_shows_the_lag(node: &Node) {
    let progress = node.json(&[
        "consumer-progress",
        "--group",
        "Readers",
        "--topic",
        "Events",
    ]);
    let queues = &progress["queues"];
    let q0 = queue(queues, 0);
    assert_eq!(
        (q0["brokerOffset"].as_i64(), q0["consumerOffset"].as_i64()),
        (Some(5), Some(2))
    );
    assert_eq!(q0["lag"], 3);
    assert_eq!(queue(queues, 1)["lag"], 0);
    assert_eq!(progress["totalLag"], 3);
    let human = node.admin(&["consumer-progress", "--group", "Readers"]);
    assert_eq!(human.code, 0, "{human:?}");
    assert!(human.stdout.contains("total lag: 3"), "{human:?}");
    node.fails(1, &["consumer-progress", "--group", "Nobody"]);
    node.fails(
        1,
        &[
            "consumer-progress",
            "--group",
            "Readers",
            "--topic",
            "Missing",
        ],
    );
}

#[test]
fn consumer_progress_connections_and_groups() {
    let node = Node::start(1);
    create_topic(&node, "Events", 2);
    let messages: Vec<(i32, Vec<u8>, Option<&str>)> = [0, 0, 0, 0, 0, 1, 1, 1]
        .iter()
        .map(|&q| (q, b"e".to_vec(), None))
        .collect();
    send(&node, "Events", &messages);
    commit(&node, "Readers", "Events", &[(0, 2), (1, 3)]);

    progress_shows_the_lag(&node);

    // A consumer online while the admin asks: its connection and subscription.
    let addr = node.addr;
    let admin_node = &node;
    let (connections, groups) = run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        let answer = client
            .request(consumer_heartbeat("client-1", "Listeners", "Events", "*"))
            .await
            .unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let connections = admin_node.json(&["consumer-connections", "--group", "Listeners"]);
        let groups = admin_node.json(&["groups"]);
        drop(client);
        (connections, groups)
    });
    let connection = &connections["connection"];
    assert_eq!(
        connection["connections"][0]["clientId"], "client-1",
        "{connections}"
    );
    assert_eq!(connection["messageModel"], "CLUSTERING");
    assert!(
        connection["subscriptions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["topic"] == "Events" && s["subString"] == "*"),
        "{connections}"
    );
    let names: Vec<&str> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["groupName"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"Listeners"), "{groups}");
    node.fails(1, &["consumer-connections", "--group", "Nobody"]);
}

/// Before the oldest message: every queue goes to its minimum, and the output says so.
fn reset_before_the_oldest(node: &Node) {
    // Before the oldest message: every queue goes to its minimum, and the output says so.
    let reset = node.json(&[
        "reset-offset",
        "--group",
        "Rewinders",
        "--topic",
        "Replay",
        "--timestamp",
        "2000-01-01T00:00:00Z",
        "--force",
    ]);
    for id in [0, 1] {
        let q = queue(&reset["queues"], id);
        assert_eq!(q["offset"], 0, "{reset}");
        assert_eq!(q["beforeOldest"], true, "{reset}");
    }
    assert!(
        reset["note"]
            .as_str()
            .unwrap()
            .contains("before the oldest"),
        "{reset}"
    );
    let progress = node.json(&[
        "consumer-progress",
        "--group",
        "Rewinders",
        "--topic",
        "Replay",
    ]);
    assert_eq!(progress["totalLag"], 6, "the reset took: {progress}");
}

/// An unknown topic or group is not found (1); a time that does not parse is bad input (2).
fn bad_resets_fail(node: &Node) {
    let line = node.fails(
        1,
        &[
            "reset-offset",
            "--group",
            "Rewinders",
            "--topic",
            "Missing",
            "--timestamp",
            "now",
        ],
    );
    assert!(line.contains("Missing"), "{line}");
    node.fails(
        1,
        &[
            "reset-offset",
            "--group",
            "Fresh",
            "--topic",
            "Replay",
            "--timestamp",
            "now",
        ],
    );
    node.fails(
        2,
        &[
            "reset-offset",
            "--group",
            "Rewinders",
            "--topic",
            "Replay",
            "--timestamp",
            "soon",
        ],
    );
}

#[test]
fn reset_offset_by_time() {
    let node = Node::start(1);
    create_topic(&node, "Replay", 2);
    let messages: Vec<(i32, Vec<u8>, Option<&str>)> = [0, 0, 0, 1, 1, 1]
        .iter()
        .map(|&q| (q, b"r".to_vec(), None))
        .collect();
    send(&node, "Replay", &messages);
    commit(&node, "Rewinders", "Replay", &[(0, 3), (1, 3)]);

    reset_before_the_oldest(&node);

    // Now: every queue goes to its end; nothing to note. The human form names the time.
    let human = node.admin(&[
        "reset-offset",
        "--group",
        "Rewinders",
        "--topic",
        "Replay",
        "--timestamp",
        "now",
        "--force",
    ]);
    assert_eq!(human.code, 0, "{human:?}");
    assert!(!human.stdout.contains("note:"), "{human:?}");
    let reset = node.json(&[
        "reset-offset",
        "--group",
        "Rewinders",
        "--topic",
        "Replay",
        "--timestamp",
        "4102444800000",
        "--force",
    ]);
    for id in [0, 1] {
        assert_eq!(queue(&reset["queues"], id)["offset"], 3, "{reset}");
    }
    assert!(reset["note"].is_null(), "{reset}");

    bad_resets_fail(&node);
}

#[test]
fn an_unreachable_or_silent_node_is_exit_3() {
    for args in [
        &["cluster"][..],
        &["broker-status"],
        &["topics"],
        &["topic-status", "--topic", "T"],
        &["topic-route", "--topic", "T"],
        &["groups"],
        &["consumer-progress", "--group", "G"],
        &["query-key", "--topic", "T", "--key", "k"],
        &[
            "query-offset",
            "--topic",
            "T",
            "--queue",
            "0",
            "--offset",
            "0",
        ],
        &[
            "reset-offset",
            "--group",
            "G",
            "--topic",
            "T",
            "--timestamp",
            "now",
        ],
        // The id names the unreachable host itself: 127.0.0.1:1, offset 0.
        &["query-id", "--id", "7F000001000000010000000000000000"],
    ] {
        let line = admin_nowhere(args).failed(3, args);
        assert!(
            line.contains("cannot reach 127.0.0.1:1"),
            "{args:?}: {line}"
        );
    }
    // Something that accepts connections and never answers: the timeout ends the wait.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let run = admin(&[
        "--broker".into(),
        addr.clone(),
        "--timeout".into(),
        "300ms".into(),
        "broker-status".into(),
    ]);
    let line = run.failed(3, &["silent broker-status"]);
    assert!(line.contains("300ms"), "{line}");
    drop(silent);
}

/// Arguments the tool refuses as bad input (exit 2) before any request.
const BAD_INPUT: &[&[&str]] = &[
    &["query-id", "--id", "XYZ"],
    &["query-id", "--id", "7F00000100002A9F000000000000100"],
    &["query-id", "--id", "7F00000100002A9F000000000000100G"],
    &["query-uniq", "--topic", "T", "--id", "not-an-id"],
    &[
        "query-key",
        "--topic",
        "T",
        "--key",
        "k",
        "--begin",
        "yesterday",
    ],
    &[
        "query-key",
        "--topic",
        "T",
        "--key",
        "k",
        "--end",
        "2026-02-30T00:00:00Z",
    ],
    &[
        "query-key",
        "--topic",
        "T",
        "--key",
        "k",
        "--begin",
        "now",
        "--end",
        "0",
    ],
    &["query-key", "--topic", "T", "--key", ""],
    &["query-key", "--topic", "T", "--key", "k", "--max", "0"],
    &[
        "reset-offset",
        "--group",
        "G",
        "--topic",
        "T",
        "--timestamp",
        "tomorrow",
    ],
    &[
        "reset-offset",
        "--group",
        "G",
        "--topic",
        "T",
        "--timestamp",
        "2026-12-02T10:00:00",
    ],
    &[
        "reset-offset",
        "--group",
        "bad group",
        "--topic",
        "T",
        "--timestamp",
        "now",
    ],
    &["topic-create", "--topic", "bad topic!"],
    &["topic-create", "--topic", "T", "--read-queues", "0"],
    &["topic-create", "--topic", "T", "--perm", "16"],
    // Neither readable nor writable, or bits a user does not give (inherit, priority).
    &["topic-create", "--topic", "T", "--perm", "9"],
    &["topic-create", "-t", "T", "-p", "0"],
    &["topic-create", "-t", "T", "-p", "7", "--upsert"],
    &["topic-update", "-t", "T", "-p", "1"],
    &["group-create", "-g", "G", "-q", "0"],
    &[
        "group-create",
        "-g",
        "G",
        "--retry-max-times",
        "1001",
        "--upsert",
    ],
    &["group-update", "-g", "G", "-q", "65"],
    &["group-update", "-g", "G", "-r=-1"],
    &["group-create", "-g", "bad group"],
    &["group-delete", "-g", ""],
    &["topic-update", "--topic", "T", "--write-queues", "5000"],
    &["topic-status", "--topic", ""],
    &["consumer-progress", "--group", "a/b"],
    &["consumer-connections", "--group", ""],
    &[
        "query-offset",
        "--topic",
        "T",
        "--queue=-1",
        "--offset",
        "0",
    ],
    &[
        "query-offset",
        "--topic",
        "T",
        "--queue",
        "0",
        "--offset=-5",
    ],
];

#[test]
fn bad_input_is_exit_2_before_any_request() {
    for args in BAD_INPUT {
        admin_nowhere(args).failed(2, args);
    }
    // Usage errors are clap's: exit 2 too, with its usage text.
    for args in [
        &["no-such-command"][..],
        &["topic-status"],
        &["cluster", "--timeout", "soon"],
        &[
            "query-offset",
            "--topic",
            "T",
            "--queue",
            "x",
            "--offset",
            "0",
        ],
    ] {
        let run = admin_nowhere(args);
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert_eq!(run.stdout, "");
    }
    // A malformed --broker or --namesrv is a usage error too, before any request (the
    // other address, where given, is one where nothing listens: a request would be exit 3).
    for args in [
        &[
            "--namesrv",
            NOWHERE,
            "--broker",
            "127.0.0.1",
            "broker-status",
        ][..],
        &[
            "--namesrv",
            NOWHERE,
            "--broker",
            "host:notaport",
            "broker-status",
        ],
        &["--namesrv", NOWHERE, "--broker", "host:0", "topics"],
        &[
            "--namesrv",
            NOWHERE,
            "--broker",
            "[::1]",
            "query-id",
            "--id",
            "7F000001000000010000000000000000",
        ],
        &["--namesrv", "127.0.0.1", "cluster"],
        &["--namesrv", "host:notaport", "cluster"],
        &["--namesrv", "::1:9876", "--broker", NOWHERE, "topics"],
    ] {
        let run = admin(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>());
        assert_eq!(run.code, 2, "{args:?}: {run:?}");
        assert_eq!(run.stdout, "", "{args:?}");
        assert!(run.stderr.contains("is not host:port"), "{args:?}: {run:?}");
    }
}

/// A server that answers every request with what `answer` makes of it.
fn fake_server(
    answer: impl Fn(&RemotingCommand) -> RemotingCommand + Send + Clone + 'static,
) -> SocketAddr {
    use std::io::{Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut buffer = Vec::new();
            let mut chunk = [0; 4096];
            while let Ok(read) = stream.read(&mut chunk) {
                if read == 0 {
                    break;
                }
                buffer.extend_from_slice(&chunk[..read]);
                while let Ok(Some((request, used))) =
                    ringmq::remoting::decode_frame(&buffer, 1 << 20)
                {
                    buffer.drain(..used);
                    let mut out = Vec::new();
                    ringmq::remoting::encode_frame(&answer(&request), &mut out).unwrap();
                    if stream.write_all(&out).is_err() {
                        return;
                    }
                }
            }
        }
    });
    addr
}

/// A name server that answers every request with GET_BROKER_CLUSTER_INFO's body as a Java
/// name server writes it: fastjson, unquoted broker-id keys.
fn fake_namesrv(body: String) -> SocketAddr {
    fake_server(move |request| {
        RemotingCommand::response_to(request, response::SUCCESS, None)
            .with_body(body.as_bytes().to_vec())
    })
}

/// A broker that answers every request with SYSTEM_ERROR and `remark`.
fn failing_broker(remark: &'static str) -> SocketAddr {
    fake_server(move |request| {
        RemotingCommand::response_to(request, response::SYSTEM_ERROR, Some(remark.to_owned()))
    })
}

/// One stored record of topic `T`, queue 0, at `queue_offset`, with `body`.
fn record_at(queue_offset: i64, body: &[u8]) -> Vec<u8> {
    use ringmq::store::record::{body_crc, encode_into, RecordInput};
    let input = RecordInput {
        topic: "T".into(),
        queue_id: 0,
        flag: 0,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        born_host: SocketAddr::from(([10, 0, 0, 7], 50000)),
        store_host: SocketAddr::from(([127, 0, 0, 1], 10911)),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body_crc: body_crc(body),
        body: bytes::Bytes::copy_from_slice(body),
        properties: String::new(),
    };
    let mut out = Vec::new();
    encode_into(&input, queue_offset, 4096, 1_700_000_000_500, &mut out).unwrap();
    out
}

#[test]
fn query_offset_pulls_as_mqadmin_and_wants_the_offset_it_asked() {
    // A broker with topic T whose pull answers the message at offset 5 whatever offset is
    // asked (as a broker may answer the next message it has), and only to a pull that
    // carries mqadmin's subscription.
    let broker = fake_server(|cmd| {
        if cmd.code == request::GET_ALL_TOPIC_CONFIG {
            let table = r#"{"topicConfigTable":{"T":{"topicName":"T","readQueueNums":4,"writeQueueNums":4,"perm":6,"topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false}},"dataVersion":{}}"#;
            return RemotingCommand::response_to(cmd, response::SUCCESS, None)
                .with_body(table.as_bytes().to_vec());
        }
        let field = |name: &str| cmd.ext_fields.get(name).map(|v| v.to_string());
        let sys_flag: i32 = field("sysFlag").unwrap_or_default().parse().unwrap_or(0);
        let as_mqadmin = cmd.code == request::PULL_MESSAGE
            && field("consumerGroup").as_deref() == Some("TOOLS_CONSUMER")
            && field("subscription").as_deref() == Some("*")
            && field("expressionType").as_deref() == Some("TAG")
            && sys_flag & ringmq::remoting::requests::FLAG_SUBSCRIPTION != 0;
        if !as_mqadmin {
            return RemotingCommand::response_to(
                cmd,
                response::SYSTEM_ERROR,
                Some(format!("not mqadmin's pull: {cmd:?}")),
            );
        }
        RemotingCommand::response_to(cmd, response::SUCCESS, None)
            .with_body(record_at(5, b"the fifth\n\x1b[2J"))
    });
    let query = |offset: &str, json: bool| {
        let mut args = vec!["--broker".to_string(), broker.to_string()];
        if json {
            args.push("--json".into());
        }
        args.extend(
            [
                "query-offset",
                "--topic",
                "T",
                "--queue",
                "0",
                "--offset",
                offset,
            ]
            .map(String::from),
        );
        admin(&args)
    };
    let run = query("5", true);
    assert_eq!(run.code, 0, "{run:?}");
    let found: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(found["messages"][0]["queueOffset"], 5);
    assert_eq!(
        found["messages"][0]["body"], "the fifth\n\x1b[2J",
        "JSON is exact"
    );
    // The human form escapes the body's control characters.
    let run = query("5", false);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("the fifth\\n\\u{1b}[2J"), "{run:?}");
    assert!(!run.stdout.contains('\x1b'), "{run:?}");
    // Asked for 3, answered 5: not the message at offset 3.
    let line = query("3", true).failed(1, &["query-offset 3, answered 5"]);
    assert!(line.contains("no message at offset 3"), "{line}");
    assert!(line.contains("the next is at offset 5"), "{line}");
}

#[test]
fn query_id_reads_a_system_error_by_its_remark() {
    let id = "7F000001000000010000000000000000";
    // Java's remark for an offset that starts no message: not found.
    let java = failing_broker("can not find message by the offset, 0");
    let run = admin(&[
        "--broker".into(),
        java.to_string(),
        "query-id".into(),
        "--id".into(),
        id.into(),
    ]);
    let line = run.failed(1, &["query-id, Java's not found"]);
    assert!(line.contains("no message at commit log offset 0"), "{line}");
    // Any other SYSTEM_ERROR is the node failing.
    let broken = failing_broker("store is not available");
    let run = admin(&[
        "--broker".into(),
        broken.to_string(),
        "query-id".into(),
        "--id".into(),
        id.into(),
    ]);
    let line = run.failed(3, &["query-id, a failing node"]);
    assert!(line.contains("store is not available"), "{line}");
}

#[test]
fn cluster_reads_java_cluster_info_and_lists_a_broker_that_does_not_answer() {
    let node = Node::start(1);
    let body = format!(
        concat!(
            r#"{{"brokerAddrTable":{{"broker-a":{{"brokerAddrs":{{0:"{}"}},"brokerName":"broker-a","cluster":"C1"}},"#,
            r#""broker-b":{{"brokerAddrs":{{0:"127.0.0.1:1"}},"brokerName":"broker-b","cluster":"C1"}}}},"#,
            r#""clusterAddrTable":{{"C1":["broker-a","broker-b"]}}}}"#
        ),
        node.addr
    );
    let namesrv = fake_namesrv(body);
    let run = admin(&[
        "--json".into(),
        "--namesrv".into(),
        namesrv.to_string(),
        "cluster".into(),
    ]);
    // The table comes first; the broker that does not answer makes the exit 3.
    assert_eq!(run.code, 3, "{run:?}");
    assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
    assert!(run.stderr.contains("127.0.0.1:1"), "{run:?}");
    let cluster: Value = serde_json::from_str(&run.stdout).unwrap();
    let brokers = cluster["brokers"].as_array().unwrap();
    assert_eq!(brokers.len(), 2, "{cluster}");
    assert_eq!(brokers[0]["brokerName"], "broker-a");
    assert_eq!(brokers[0]["addr"], node.addr.to_string());
    assert!(brokers[0]["runtime"].is_object(), "{cluster}");
    assert_eq!(brokers[1]["brokerName"], "broker-b");
    assert!(brokers[1]["runtime"].is_null(), "{cluster}");
    assert!(
        brokers[1]["error"]
            .as_str()
            .unwrap()
            .contains("cannot reach"),
        "{cluster}"
    );

    // The same cluster info names the broker other commands use when --broker is not given.
    let run = admin(&[
        "--json".into(),
        "--namesrv".into(),
        namesrv.to_string(),
        "broker-status".into(),
    ]);
    assert_eq!(run.code, 0, "{run:?}");
    let status: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(status["broker"], node.addr.to_string());
}

/// The group entry `groups --json` lists for `group`, if any.
fn listed_group(node: &Node, group: &str) -> Option<Value> {
    node.json(&["groups"])["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["groupName"] == group)
        .map(|g| g["config"].clone())
}

#[test]
fn group_commands_create_update_and_delete() {
    let node = Node::start(1);
    // mqadmin's letters: -q retryQueueNums, -r retryMaxTimes, -s consumeEnable,
    // -d consumeBroadcastEnable, -o consumeMessageOrderly.
    let created = node.json(&[
        "group-create",
        "-g",
        "Billing",
        "-q",
        "2",
        "-r",
        "5",
        "-d",
        "false",
        "-o",
    ]);
    assert_eq!(created["action"], "created", "{created}");
    assert_eq!(created["broker"], node.addr.to_string());
    let config = listed_group(&node, "Billing").expect("listed after create");
    assert_eq!(config["retryQueueNums"], 2, "{config}");
    assert_eq!(config["retryMaxTimes"], 5, "{config}");
    assert_eq!(config["consumeBroadcastEnable"], false, "{config}");
    assert_eq!(config["consumeMessageOrderly"], true, "{config}");
    assert_eq!(config["consumeEnable"], true, "a default: {config}");
    assert_eq!(config["consumeFromMinEnable"], true, "a default: {config}");

    let line = node.fails(2, &["group-create", "-g", "Billing"]);
    assert!(line.contains("exists already"), "{line}");
    assert!(line.contains("--upsert"), "{line}");

    // An update changes what is given and keeps the rest.
    let updated = node.json(&[
        "group-update",
        "--group",
        "Billing",
        "--consume-enable",
        "false",
    ]);
    assert_eq!(updated["action"], "updated");
    let config = listed_group(&node, "Billing").unwrap();
    assert_eq!(config["consumeEnable"], false, "{config}");
    assert_eq!(config["retryMaxTimes"], 5, "kept: {config}");
    assert_eq!(config["consumeMessageOrderly"], true, "kept: {config}");
    let human = node.admin(&["group-update", "-g", "Billing", "-s", "true"]);
    assert_eq!(human.code, 0, "{human:?}");
    assert!(
        human
            .stdout
            .starts_with(&format!("updated group Billing on {}", node.addr)),
        "{human:?}"
    );
    node.fails(1, &["group-update", "-g", "Nobody", "-q", "2"]);

    // Delete without --remove-offset keeps the offsets; with it they go.
    create_topic(&node, "Invoices", 1);
    send(
        &node,
        "Invoices",
        &[(0, b"i".to_vec(), None), (0, b"i".to_vec(), None)],
    );
    commit(&node, "Billing", "Invoices", &[(0, 1)]);
    let deleted = node.json(&["group-delete", "-g", "Billing"]);
    assert_eq!(deleted["action"], "deleted", "{deleted}");
    assert_eq!(deleted["removeOffset"], false, "{deleted}");
    assert!(listed_group(&node, "Billing").is_none());
    let progress = node.json(&["consumer-progress", "-g", "Billing", "-t", "Invoices"]);
    assert_eq!(progress["totalLag"], 1, "offsets kept: {progress}");
    node.fails(1, &["group-delete", "-g", "Billing"]);

    node.json(&["group-create", "-g", "Billing"]);
    let deleted = node.json(&["group-delete", "-g", "Billing", "-r", "true"]);
    assert_eq!(deleted["removeOffset"], true, "{deleted}");
    let progress = node.json(&["consumer-progress", "-g", "Billing", "-t", "Invoices"]);
    assert_eq!(
        queue(&progress["queues"], 0)["consumerOffset"],
        0,
        "offsets removed: {progress}"
    );
    assert_eq!(progress["totalLag"], 2, "{progress}");
}

#[test]
fn upsert_reruns_change_nothing_or_what_differs() {
    let node = Node::start(1);
    let topic = [
        "topic-create",
        "-t",
        "Provisioned",
        "-r",
        "4",
        "-w",
        "4",
        "--upsert",
    ];
    assert_eq!(node.json(&topic)["action"], "created");
    let rerun = node.json(&topic);
    assert_eq!(rerun["action"], "unchanged", "{rerun}");
    assert_eq!(rerun["topic"]["readQueueNums"], 4);
    let human = node.admin(&topic);
    assert_eq!(human.code, 0, "{human:?}");
    assert!(
        human.stdout.starts_with("unchanged topic Provisioned"),
        "{human:?}"
    );
    // A setting that differs is brought up to date; those not given are kept.
    let changed = node.json(&["topic-create", "-t", "Provisioned", "-p", "4", "--upsert"]);
    assert_eq!(changed["action"], "updated", "{changed}");
    assert_eq!(changed["topic"]["perm"], 4);
    assert_eq!(changed["topic"]["writeQueueNums"], 4, "kept: {changed}");
    // Without --upsert a rerun is still refused.
    node.fails(2, &["topic-create", "-t", "Provisioned"]);

    let group = ["group-create", "-g", "Provisioners", "-r", "3", "--upsert"];
    assert_eq!(node.json(&group)["action"], "created");
    assert_eq!(node.json(&group)["action"], "unchanged");
    let changed = node.json(&["group-create", "-g", "Provisioners", "-q", "4", "--upsert"]);
    assert_eq!(changed["action"], "updated", "{changed}");
    let config = listed_group(&node, "Provisioners").unwrap();
    assert_eq!(
        (
            config["retryQueueNums"].as_i64(),
            config["retryMaxTimes"].as_i64()
        ),
        (Some(4), Some(3)),
        "{config}"
    );
    node.fails(2, &["group-create", "-g", "Provisioners"]);
}

#[test]
fn perm_9_is_refused_naming_the_permissions_there_are() {
    let line = admin_nowhere(&["topic-create", "-t", "T", "--perm", "9"]).failed(2, &["--perm 9"]);
    assert!(line.contains("neither read nor written"), "{line}");
    assert!(
        line.contains("2 (write only), 4 (read only) or 6 (read and write)"),
        "{line}"
    );
}

#[test]
fn an_address_that_is_something_else_is_named_for_what_it_is() {
    let node = Node::start(1);
    let run = |args: &[&str]| admin(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>());
    let (broker, namesrv, metrics) = (
        node.addr.to_string(),
        node.namesrv.to_string(),
        node.metrics.to_string(),
    );
    // The broker port given as the name server: every way a command asks the name server.
    for args in [
        &["-n", &broker, "cluster"][..],
        &["-n", &broker, "topics"],
        &["-n", &broker, "topic-route", "-t", "T"],
        &["-n", &broker, "broker-status"],
        &["-n", &broker, "topic-create", "-t", "T"],
    ] {
        let line = run(args).failed(2, args);
        assert!(
            line.contains(&format!(
                "{broker} is a broker, not a name server: pass it as --broker/-b"
            )),
            "{args:?}: {line}"
        );
    }
    // The name server given as the broker.
    for args in [
        &["-n", &namesrv, "-b", &namesrv, "broker-status"][..],
        &["-n", &namesrv, "-b", &namesrv, "topic-create", "-t", "T"],
        &["-n", &namesrv, "-b", &namesrv, "groups"],
    ] {
        let line = run(args).failed(2, args);
        assert!(
            line.contains(&format!(
                "{namesrv} is a name server, not a broker: pass it as --namesrv/-n"
            )),
            "{args:?}: {line}"
        );
    }
    // The metrics port given as the broker, or as the name server.
    for (args, flag) in [
        (
            &["-n", &namesrv, "-b", &metrics, "broker-status"][..],
            "--broker/-b",
        ),
        (
            &["-n", &namesrv, "-b", &metrics, "group-create", "-g", "G"],
            "--broker/-b",
        ),
        (&["-n", &metrics, "cluster"], "--namesrv/-n"),
        (&["-n", &metrics, "topics"], "--namesrv/-n"),
    ] {
        let line = run(args).failed(2, args);
        assert!(
            line.contains(&format!(
                "{metrics} answers HTTP (\"HTTP/1.1 400 Bad Request\"; the metrics port?), not \
                 the RocketMQ remoting protocol"
            )),
            "{args:?}: {line}"
        );
        assert!(line.contains(flag), "{args:?}: {line}");
    }
    // Nothing was created on the way.
    assert!(!topic_names(&node.json(&["topics"])).contains(&"T".to_string()));
    assert!(listed_group(&node, "G").is_none());
}

#[test]
fn the_name_server_from_namesrv_addr_and_the_cluster_flag() {
    let node = Node::start(1);
    let namesrv = node.namesrv.to_string();
    let args = |list: &[&str]| list.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let cluster_of = |run: Run| -> Value {
        assert_eq!(run.code, 0, "{run:?}");
        serde_json::from_str(&run.stdout).unwrap()
    };
    // NAMESRV_ADDR alone.
    let listed = cluster_of(admin_env(Some(&namesrv), &args(&["--json", "cluster"])));
    assert_eq!(
        listed["brokers"][0]["addr"],
        node.addr.to_string(),
        "{listed}"
    );
    // The flag wins over the environment.
    cluster_of(admin_env(
        Some(NOWHERE),
        &args(&["--json", "-n", &namesrv, "cluster"]),
    ));
    let line = admin_env(Some(NOWHERE), &args(&["cluster"])).failed(3, &["NAMESRV_ADDR nowhere"]);
    assert!(line.contains("cannot reach 127.0.0.1:1"), "{line}");
    // mqadmin's `;` list: the first that takes a connection.
    let list = format!("{NOWHERE};{namesrv}");
    cluster_of(admin_env(Some(&list), &args(&["--json", "cluster"])));
    let run = admin_env(Some("127.0.0.1"), &args(&["cluster"]));
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("NAMESRV_ADDR"), "{run:?}");

    // -c: the cluster's masters, found through the name server.
    let cluster = ["-n", namesrv.as_str(), "--json", "-c", "DefaultCluster"];
    let with = |rest: &[&str]| {
        let mut all: Vec<&str> = cluster.to_vec();
        all.extend_from_slice(rest);
        admin(&args(&all))
    };
    let created = cluster_of(with(&[
        "topic-create",
        "-t",
        "Everywhere",
        "-r",
        "2",
        "-w",
        "2",
    ]));
    assert_eq!(created["cluster"], "DefaultCluster", "{created}");
    assert_eq!(created["results"][0]["action"], "created", "{created}");
    assert_eq!(
        created["results"][0]["broker"],
        node.addr.to_string(),
        "{created}"
    );
    let status = cluster_of(with(&["topic-status", "-t", "Everywhere"]));
    assert_eq!(status["queues"].as_array().unwrap().len(), 2, "{status}");
    let groups = cluster_of(with(&["group-create", "-g", "Everyone"]));
    assert_eq!(groups["results"][0]["action"], "created", "{groups}");
    let listed = cluster_of(with(&["cluster"]));
    assert_eq!(listed["brokers"].as_array().unwrap().len(), 1, "{listed}");
    let line = admin(&args(&[
        "-n",
        &namesrv,
        "-c",
        "Elsewhere",
        "topic-create",
        "-t",
        "T",
    ]))
    .failed(1, &["-c Elsewhere"]);
    assert!(line.contains("no cluster Elsewhere"), "{line}");
    assert!(line.contains("DefaultCluster"), "{line}");
}
