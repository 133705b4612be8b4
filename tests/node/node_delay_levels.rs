//! Delay levels against an in-process node (reference-2 §1.4): a send with `DELAY` is
//! stored in `SCHEDULE_TOPIC_XXXX` and answered as Java answers it; it is not in its real
//! queue before its time and is there after, with its topic, queue, body and properties;
//! out-of-range levels are clamped or plain; with two shards the real queue may be on the
//! other shard than the level's queue; and what is pending at a clean stop is delivered
//! after the restart, once, never early, the cursors surviving in
//! `config/delayOffset.json`.

use crate::common;

use std::time::Duration;

use common::raw::Raw;
use common::{node_config, pull_records, wait_for};
use ringmq::broker::delay::{DelayLevels, DELAY, REAL_QID, REAL_TOPIC};
use ringmq::broker::naming::ids::decode_offset_msg_id;
use ringmq::node::NodeHandle;
use ringmq::node_config::NodeConfig;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::{pull_request, queue_request, send_request_v1, send_request_v2};
use ringmq::remoting::RemotingCommand;
use ringmq::shard::routing::queue_owner;
use ringmq::store::properties;
use ringmq::store::topic::SCHEDULE_TOPIC;

/// Level 1 waits 300 ms, level 2 2 s, level 3 (the last) 3 s.
const LEVELS: &str = "300ms 2s 3s";
const LEVEL_MS: [i64; 3] = [300, 2000, 3000];
/// Longest any test waits for a delivery.
const PATIENCE: Duration = Duration::from_secs(20);

fn options(dir: &std::path::Path, shards: u8) -> NodeConfig {
    let mut options = node_config(dir);
    options.shards = shards;
    options.message_delay_level = DelayLevels::parse(LEVELS).unwrap();
    options
}

fn start(dir: &std::path::Path, shards: u8) -> NodeHandle {
    ringmq::node::start(options(dir, shards)).expect("node starts")
}

fn ext<'a>(command: &'a RemotingCommand, field: &str) -> &'a str {
    command
        .opt_str(field)
        .unwrap_or_else(|| panic!("no {field} in {command:?}"))
}

/// A SEND_MESSAGE (v1, or v2 with `v2`) of `body` to `topic` queue `queue`, tag `TagA`,
/// with `DELAY` = `delay` when given.
fn delayed_send(
    topic: &str,
    queue: i32,
    body: &str,
    delay: Option<&str>,
    v2: bool,
) -> RemotingCommand {
    let (mut send, field) = if v2 {
        (
            send_request_v2(topic, queue, body.as_bytes(), Some("TagA"), None),
            "i",
        )
    } else {
        (
            send_request_v1(topic, queue, body.as_bytes(), Some("TagA"), None),
            "properties",
        )
    };
    let mut props = properties::normalized(send.opt_str(field).unwrap_or("")).into_owned();
    if let Some(delay) = delay {
        properties::push_pair(&mut props, DELAY, delay);
    }
    send.put_ext(field, props);
    send
}

fn max_offset(raw: &mut Raw, topic: &str, queue: i32) -> i64 {
    let answer = raw.call(queue_request(request::GET_MAX_OFFSET, topic, queue));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    ext(&answer, "offset").parse().unwrap()
}

/// The records of `topic` queue `queue` from `offset` (at most 32), as a pull returns them.
fn pull(raw: &mut Raw, topic: &str, queue: i32, offset: u64) -> RemotingCommand {
    raw.call(pull_request(topic, queue, offset, 32, None, None))
}

/// Waits until `topic` queue `queue` holds `count` messages.
fn wait_for_messages(raw: &mut Raw, topic: &str, queue: i32, count: i64) {
    wait_for(
        PATIENCE,
        &format!("{count} messages in {topic}/{queue}"),
        || max_offset(raw, topic, queue) >= count,
    );
}

fn props_of(record: &ringmq::store::record::RecordView<'_>) -> Vec<(String, String)> {
    properties::parse(record.properties)
        .into_iter()
        .filter(|(key, _)| !key.starts_with("__CRC32C"))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

fn prop<'a>(props: &'a [(String, String)], key: &str) -> Option<&'a str> {
    props
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, value)| value.as_str())
}

#[test]
fn a_delayed_send_waits_in_the_schedule_topic_and_arrives_on_time_with_its_properties() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), 1);
    let mut raw = Raw::connect(node.addr());

    let answer = raw.call(delayed_send("Orders", 1, "late", Some("1"), false));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    // Java's answer: the queue asked for, the scheduled record's offset and msgId.
    assert_eq!(ext(&answer, "queueId"), "1");
    assert_eq!(ext(&answer, "queueOffset"), "0");
    let uniq_key = ext(&answer, "transactionId").to_owned();
    let (_, scheduled_phys) = decode_offset_msg_id(ext(&answer, "msgId")).unwrap();

    let scheduled = pull(&mut raw, SCHEDULE_TOPIC, 0, 0);
    assert_eq!(scheduled.code, response::SUCCESS, "{scheduled:?}");
    let records = pull_records(&scheduled.body);
    assert_eq!(records.len(), 1);
    let waiting = &records[0];
    assert_eq!((waiting.topic, waiting.queue_id), (SCHEDULE_TOPIC, 0));
    assert_eq!(waiting.phys_offset as u64, scheduled_phys);
    let waiting_props = props_of(waiting);
    assert_eq!(prop(&waiting_props, REAL_TOPIC), Some("Orders"));
    assert_eq!(prop(&waiting_props, REAL_QID), Some("1"));
    assert_eq!(prop(&waiting_props, DELAY), Some("1"));
    let due = waiting.store_timestamp + LEVEL_MS[0];
    // The system topic was created on demand, one queue per level.
    let topics = raw.call(RemotingCommand::request(
        request::GET_ALL_TOPIC_CONFIG,
        Default::default(),
    ));
    let table: serde_json::Value = serde_json::from_slice(&topics.body).unwrap();
    assert_eq!(
        table["topicConfigTable"][SCHEDULE_TOPIC]["writeQueueNums"], 3,
        "{table}"
    );

    // Not in the real queue before its time (checked right away: 300 ms is far off).
    assert_eq!(max_offset(&mut raw, "Orders", 1), 0);
    wait_for_messages(&mut raw, "Orders", 1, 1);

    let delivered = pull(&mut raw, "Orders", 1, 0);
    assert_eq!(delivered.code, response::SUCCESS, "{delivered:?}");
    let records = pull_records(&delivered.body);
    assert_eq!(records.len(), 1);
    let record = &records[0];
    assert_eq!((record.topic, record.queue_id), ("Orders", 1));
    assert_eq!(record.body, b"late");
    assert!(
        record.store_timestamp >= due,
        "delivered at {} before its due time {due}",
        record.store_timestamp
    );
    assert_eq!(record.born_timestamp, waiting.born_timestamp);
    assert_eq!(record.born_host, waiting.born_host);
    let props = props_of(record);
    assert_eq!(prop(&props, "TAGS"), Some("TagA"));
    assert_eq!(prop(&props, properties::UNIQ_KEY), Some(uniq_key.as_str()));
    assert_eq!(prop(&props, REAL_TOPIC), Some("Orders"));
    assert_eq!(prop(&props, REAL_QID), Some("1"));
    assert_eq!(prop(&props, properties::WAIT), Some("false"));
    assert_eq!(prop(&props, DELAY), None, "{props:?}");
    // Its queue entry carries the tag hash again: a tag subscription finds it.
    let filtered = raw.call(pull_request("Orders", 1, 0, 32, None, Some("TagA")));
    assert_eq!(pull_records(&filtered.body).len(), 1, "{filtered:?}");

    // The scheduler counts the delivery once the put's acknowledgement reached it.
    let level_1 = |node: &NodeHandle| {
        let figures = node.metrics().shard(0).delay_figures();
        assert_eq!(figures.len(), 3, "one scheduler per level: {figures:?}");
        *figures.iter().find(|f| f.level == 1).unwrap()
    };
    wait_for(PATIENCE, "the delivery counted", || {
        let figures = level_1(&node);
        figures.delivered == 1 && figures.pending == 0
    });
    assert_eq!(level_1(&node).skipped, 0);
    node.shutdown().unwrap();
}

#[test]
fn levels_out_of_range_are_clamped_plain_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), 1);
    let mut raw = Raw::connect(node.addr());

    // Above the last level: the last level (queue 2), DELAY rewritten to it.
    let answer = raw.call(delayed_send("Clamped", 0, "far", Some("99"), true));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    assert_eq!(ext(&answer, "queueId"), "0");
    let scheduled = pull(&mut raw, SCHEDULE_TOPIC, 2, 0);
    let records = pull_records(&scheduled.body);
    assert_eq!(records.len(), 1, "{scheduled:?}");
    assert_eq!(prop(&props_of(&records[0]), DELAY), Some("3"));

    // 0 and negative levels are plain sends: in the real queue at once.
    for (i, delay) in ["0", "-1"].into_iter().enumerate() {
        let answer = raw.call(delayed_send("Plain", 0, "now", Some(delay), false));
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        assert_eq!(ext(&answer, "queueOffset"), i.to_string());
    }
    assert_eq!(max_offset(&mut raw, "Plain", 0), 2);

    // Not a number: refused, nothing stored.
    let answer = raw.call(delayed_send("Bad", 0, "x", Some("soon"), false));
    assert_eq!(answer.code, response::MESSAGE_ILLEGAL, "{answer:?}");
    assert!(
        answer.remark.as_deref().unwrap().contains("'soon'"),
        "{answer:?}"
    );
    // A client cannot write the schedule topic itself.
    let direct = raw.call(delayed_send(SCHEDULE_TOPIC, 0, "x", None, false));
    assert_eq!(direct.code, response::NO_PERMISSION, "{direct:?}");
    assert_eq!(max_offset(&mut raw, SCHEDULE_TOPIC, 0), 0);
    assert_eq!(max_offset(&mut raw, SCHEDULE_TOPIC, 2), 1);

    // A batch asking for a delay is refused as Java refuses it.
    let mut batch = delayed_send("Batch", 0, "", Some("1"), true);
    batch.code = request::SEND_BATCH_MESSAGE;
    let answer = raw.call(batch);
    assert_eq!(answer.code, response::MESSAGE_ILLEGAL, "{answer:?}");

    // The clamped message is still delivered, at the last level's time.
    wait_for_messages(&mut raw, "Clamped", 0, 1);
    let delivered = pull(&mut raw, "Clamped", 0, 0);
    let record = &pull_records(&delivered.body)[0];
    assert!(record.store_timestamp >= records[0].store_timestamp + LEVEL_MS[2]);
    node.shutdown().unwrap();
}

#[test]
fn with_two_shards_a_message_is_scheduled_on_one_and_delivered_to_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), 2);
    let level = 1;
    let schedule_owner = queue_owner(SCHEDULE_TOPIC, level - 1, 2);
    // A real queue the other shard owns.
    let topic = "Remote";
    let queue = (0..8)
        .find(|queue| queue_owner(topic, *queue, 2) != schedule_owner)
        .unwrap();
    let real_owner = queue_owner(topic, queue, 2);
    // Several connections, so sends arrive on both shards.
    let mut connections: Vec<Raw> = (0..4).map(|_| Raw::connect(node.addr())).collect();
    for (i, raw) in connections.iter_mut().enumerate() {
        let answer = raw.call(delayed_send(
            topic,
            queue,
            &format!("m{i}"),
            Some("1"),
            i % 2 == 1,
        ));
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        assert_eq!(ext(&answer, "queueId"), queue.to_string());
        let (_, phys) = decode_offset_msg_id(ext(&answer, "msgId")).unwrap();
        assert_eq!(
            (phys >> 56) as u8,
            schedule_owner,
            "scheduled on its level's shard"
        );
    }
    // The broker picks the real queue (-1): it is still delayed, and reported.
    let raw = &mut connections[0];
    let answer = raw.call(delayed_send(topic, -1, "picked", Some("1"), false));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    let picked: i32 = ext(&answer, "queueId").parse().unwrap();
    assert!((0..8).contains(&picked), "{answer:?}");

    wait_for_messages(raw, topic, queue, 4);
    wait_for_messages(raw, topic, picked, if picked == queue { 5 } else { 1 });
    let delivered = pull(raw, topic, queue, 0);
    let records = pull_records(&delivered.body);
    let mut bodies: Vec<String> = records
        .iter()
        .filter(|record| record.body != b"picked")
        .map(|record| {
            assert_eq!((record.phys_offset as u64 >> 56) as u8, real_owner);
            assert_eq!((record.topic, record.queue_id), (topic, queue));
            String::from_utf8(record.body.to_vec()).unwrap()
        })
        .collect();
    bodies.sort();
    assert_eq!(bodies, ["m0", "m1", "m2", "m3"]);
    wait_for(PATIENCE, "five deliveries counted", || {
        let figures = node.metrics().shard(schedule_owner).delay_figures();
        let level_1 = figures.iter().find(|f| f.level == level as u32).unwrap();
        level_1.delivered == 5 && level_1.pending == 0
    });
    assert!(node
        .metrics()
        .shard(1 - schedule_owner)
        .delay_figures()
        .iter()
        .all(|f| f.level != level as u32));
    node.shutdown().unwrap();
}

#[test]
fn delayed_messages_pending_at_a_clean_stop_are_delivered_after_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), 1);
    let mut raw = Raw::connect(node.addr());
    // One delivered before the stop: its cursor must survive, so it is not delivered again.
    let answer = raw.call(delayed_send("Resume", 0, "before", Some("1"), false));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    wait_for_messages(&mut raw, "Resume", 0, 1);
    // Pending at the stop: level 2 and 3, far enough off to be stopped before them.
    for (body, level) in [("a", "2"), ("b", "3"), ("c", "2")] {
        let answer = raw.call(delayed_send("Resume", 0, body, Some(level), false));
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    }
    assert_eq!(max_offset(&mut raw, "Resume", 0), 1, "none due yet");
    drop(raw);
    node.shutdown().unwrap();

    let file = dir.path().join("config/delayOffset.json");
    let cursors: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    // Level 1 moved past its message; levels 2 and 3 never moved (from their start).
    assert_eq!(
        cursors["offsetTable"],
        serde_json::json!({"1": 1}),
        "{cursors}"
    );

    let node = start(dir.path(), 1);
    let mut raw = Raw::connect(node.addr());
    wait_for_messages(&mut raw, "Resume", 0, 4);
    let delivered = pull(&mut raw, "Resume", 0, 0);
    let records = pull_records(&delivered.body);
    let bodies: Vec<&[u8]> = records.iter().map(|record| record.body).collect();
    assert_eq!(bodies.len(), 4, "none lost, none twice: {bodies:?}");
    assert_eq!(bodies[0], b"before");
    let mut rest: Vec<&[u8]> = bodies[1..].to_vec();
    rest.sort();
    assert_eq!(rest, [b"a", b"b", b"c"]);
    // None early: each after its scheduled record's store time plus its level's delay.
    for (level, queue) in [(2usize, 1), (3, 2)] {
        let scheduled = pull(&mut raw, SCHEDULE_TOPIC, queue, 0);
        for waiting in pull_records(&scheduled.body) {
            let copy = records
                .iter()
                .find(|record| record.body == waiting.body)
                .unwrap();
            assert!(
                copy.store_timestamp >= waiting.store_timestamp + LEVEL_MS[level - 1],
                "level {level}: delivered at {} before {}",
                copy.store_timestamp,
                waiting.store_timestamp + LEVEL_MS[level - 1]
            );
        }
    }
    // Nothing more comes: every cursor is at its queue's end.
    wait_for(PATIENCE, "the cursors at the end", || {
        let figures = node.metrics().shard(0).delay_figures();
        figures.iter().all(|f| f.pending == 0)
            && figures.iter().map(|f| f.delivered).sum::<u64>() == 3
    });
    assert_eq!(max_offset(&mut raw, "Resume", 0), 4);
    node.shutdown().unwrap();
    let cursors: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(
        cursors["offsetTable"],
        serde_json::json!({"1": 1, "2": 2, "3": 1}),
        "{cursors}"
    );
}

/// Delayed messages due together under SYNC_FLUSH.
const DUE_TOGETHER: usize = 600;

#[test]
fn delayed_messages_due_together_under_sync_flush_share_their_fsyncs() {
    // One delivery at a time cost one CommitLog fsync per message, so a backlog fell
    // behind its due times by the fsync latency times its length (p99 7.9 s with 100,000
    // pending). With a window of puts in flight (`scheduleDeliveryWindow`, 256 by
    // default), a due backlog shares group commits.
    let (delivered, spent) = deliver_due_together(None);
    assert!(
        spent * 8 <= delivered,
        "{delivered} deliveries took {spent} fsyncs: they did not share group commits"
    );
}

#[test]
fn a_delivery_window_of_one_puts_one_delayed_message_per_fsync() {
    // The setting is honoured: with one delivery in flight, each waits for its own fsync.
    let (delivered, spent) = deliver_due_together(Some(1));
    assert!(
        spent >= delivered,
        "{delivered} deliveries with a window of 1 took only {spent} fsyncs"
    );
}

/// Shard 0's CommitLog fsyncs as `/metrics` shows them, sampled after this call.
///
/// The store's counters reach the page in the shard's once-a-second sample, so a scrape
/// may show a count from before what the caller just waited for. A pull parked on an
/// empty queue is counted in the same sample, after the store's: once the page counts
/// `parked` pulls (this call parks the `parked`-th, on `Together` queue `parked`), its
/// fsync count was sampled after this call.
fn sampled_fsyncs(parker: &mut Raw, metrics: std::net::SocketAddr, parked: i32) -> u64 {
    parker.send(pull_request(
        "Together",
        parked,
        0,
        1,
        Some(Duration::from_secs(60)),
        None,
    ));
    let mut fsyncs = 0;
    wait_for(PATIENCE, "a metrics sample after a pull was parked", || {
        let page = common::scrape_metrics(metrics);
        fsyncs = common::metric_sample(&page, "ringmq_fsyncs_total{shard=\"0\"}");
        common::metric_sample(&page, "ringmq_parked_pulls{shard=\"0\"}") >= parked as u64
    });
    fsyncs
}

/// Sends [`DUE_TOGETHER`] messages of the 3 s level to one queue of a SYNC_FLUSH node with
/// `window` deliveries in flight (the default when `None`), waits for all to be delivered,
/// checks none was lost, doubled or reordered, and returns how many were delivered after
/// the sends were acknowledged and how many CommitLog fsyncs that took.
fn deliver_due_together(window: Option<usize>) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = options(dir.path(), 1);
    config.flush_disk_type = ringmq::config::FlushMode::Sync;
    config.metrics_exporter_type = ringmq::node_config::MetricsExporter::Prom;
    if let Some(window) = window {
        config.schedule_delivery_window = window;
    }
    let node = ringmq::node::start(config).expect("node starts");
    let metrics = node.metrics_addr().expect("a metrics endpoint");
    let mut parker = Raw::connect(node.addr());
    let mut parked = 0;
    let mut fsyncs = || {
        parked += 1;
        sampled_fsyncs(&mut parker, metrics, parked)
    };
    let mut raw = Raw::connect(node.addr());
    // Pipelined, so they land within a few group commits, well inside the last level's 3 s.
    let sent: Vec<i32> = (0..DUE_TOGETHER)
        .map(|i| {
            raw.send(delayed_send(
                "Together",
                0,
                &format!("m{i}"),
                Some("3"),
                true,
            ))
        })
        .collect();
    for opaque in sent {
        let answer = raw.next(PATIENCE, |frame| frame.opaque == opaque);
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    }
    let fsyncs_before = fsyncs();
    let delivered_before = max_offset(&mut raw, "Together", 0);
    wait_for_messages(&mut raw, "Together", 0, DUE_TOGETHER as i64);
    let delivered = DUE_TOGETHER as u64 - delivered_before as u64;
    let spent = fsyncs() - fsyncs_before;
    eprintln!(
        "window {window:?}: {delivered} delayed messages delivered with {spent} CommitLog fsyncs"
    );
    assert!(
        delivered >= DUE_TOGETHER as u64 / 2,
        "only {delivered} of {DUE_TOGETHER} were still pending when the sends were \
         acknowledged: the sends took most of the level's 3 s"
    );
    // None lost, none twice, in their queue's order.
    let mut bodies = Vec::new();
    while bodies.len() < DUE_TOGETHER {
        let answer = pull(&mut raw, "Together", 0, bodies.len() as u64);
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        bodies.extend(
            pull_records(&answer.body)
                .iter()
                .map(|record| String::from_utf8(record.body.to_vec()).unwrap()),
        );
    }
    let expected: Vec<String> = (0..DUE_TOGETHER).map(|i| format!("m{i}")).collect();
    assert_eq!(bodies, expected);
    node.shutdown().unwrap();
    (delivered, spent)
}
