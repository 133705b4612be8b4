//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ringmq::io::sim::{SimConfig, SimDisk};
use ringmq::io::Disk;
use ringmq::store::properties;
use ringmq::store::record::{body_crc, decode, Decoded, RecordInput, RecordView, Verify};

pub mod cluster;
pub mod log;
pub mod model;
pub mod process_cluster;
pub mod process_controllers;
pub mod process_replication;
pub mod raw;
pub mod serve;

/// Runs `future` on a current-thread runtime inside a `LocalSet`, as a shard does.
/// With `paused` time, timers advance only when every task is idle, so runs repeat exactly.
pub fn run_local<F: Future>(paused: bool, future: F) -> F::Output {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all();
    if paused {
        builder.start_paused(true);
    }
    let runtime = builder.build().expect("runtime");
    tokio::task::LocalSet::new().block_on(&runtime, future)
}

pub fn sim_disk(seed: u64) -> SimDisk {
    SimDisk::new(SimConfig::with_seed(seed))
}

pub fn as_disk(sim: &SimDisk) -> Rc<dyn Disk> {
    Rc::new(sim.clone())
}

/// A message with the given body and optional tag and keys.
pub fn message(
    topic: &str,
    queue_id: i32,
    body: &[u8],
    tags: Option<&str>,
    keys: Option<&str>,
) -> RecordInput {
    let mut pairs = Vec::new();
    if let Some(tags) = tags {
        pairs.push((properties::TAGS, tags));
    }
    if let Some(keys) = keys {
        pairs.push((properties::KEYS, keys));
    }
    RecordInput {
        topic: topic.to_string(),
        queue_id,
        flag: 0,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        born_host: SocketAddr::from(([10, 0, 0, 7], 50000)),
        store_host: SocketAddr::from(([127, 0, 0, 1], 10911)),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body_crc: body_crc(body),
        body: Bytes::copy_from_slice(body),
        properties: properties::encode(pairs),
    }
}

/// Waits until `condition` holds, checking every few milliseconds, for at most `limit`.
pub fn wait_for(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "gave up after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The node's `/metrics` page at `addr` (its `metrics_addr()`), the whole HTTP answer.
pub fn scrape_metrics(addr: std::net::SocketAddr) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    text
}

/// The value of the sample line of a metrics page that is exactly `series`.
pub fn metric_sample(text: &str, series: &str) -> u64 {
    let line = text
        .lines()
        .find(|line| line.rsplit_once(' ').map(|(name, _)| name) == Some(series))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// The project's seeded PRNG, under the name the tests use.
#[allow(unused_imports)]
pub use ringmq::rng::SplitMix64 as Rng;

/// Iterations of a fuzz loop: `RINGMQ_FUZZ_ITERS`, else 20,000.
pub fn fuzz_iters() -> usize {
    std::env::var("RINGMQ_FUZZ_ITERS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(20_000)
}

/// The seed of a fuzz loop: `RINGMQ_FUZZ_SEED`, else `default`.
pub fn fuzz_seed(default: u64) -> u64 {
    std::env::var("RINGMQ_FUZZ_SEED")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

/// The seeds a simulation sweeps: `RINGMQ_SIM_SEEDS=START..END`, else `default`.
pub fn sim_seeds(default: std::ops::Range<u64>) -> std::ops::Range<u64> {
    match std::env::var("RINGMQ_SIM_SEEDS") {
        Ok(text) => {
            let (start, end) = text
                .split_once("..")
                .unwrap_or_else(|| panic!("RINGMQ_SIM_SEEDS={text}: expected START..END"));
            let start: u64 = start.trim().parse().expect("RINGMQ_SIM_SEEDS start");
            let end: u64 = end.trim().parse().expect("RINGMQ_SIM_SEEDS end");
            start..end
        }
        Err(_) => default,
    }
}

/// CommitLog segment size of a test node: small, so the stores tests make stay small.
pub const TEST_SEGMENT: u64 = 4 * 1024 * 1024;

/// IndexFile shape of a test node: 4,096 slots and 16,384 entries, a 344 KB file.
pub const TEST_INDEX_SLOTS: u32 = 4096;
pub const TEST_INDEX_ENTRIES: u32 = 16 * 1024;

/// ConsumeQueue file bytes of a test node: 6,000 entries.
pub const TEST_CONSUME_QUEUE_FILE: u64 = 6000 * 20;

/// The broker.conf keys (and values) that give a test node in its own process the small
/// IndexFiles and ConsumeQueue files of [`node_config`].
pub fn small_store_keys() -> [(&'static str, String); 3] {
    [
        ("maxHashSlotNum", TEST_INDEX_SLOTS.to_string()),
        ("maxIndexNum", TEST_INDEX_ENTRIES.to_string()),
        (
            "mapedFileSizeConsumeQueue",
            TEST_CONSUME_QUEUE_FILE.to_string(),
        ),
    ]
}

/// The broker.conf keys (and values) that give a test node in its own process
/// [`TEST_SEGMENT`]-byte segments and, since every message must fit one, the largest
/// message such a segment holds as `maxMessageSize` (as [`with_segment`] does in process).
pub fn small_log_keys() -> [(&'static str, String); 2] {
    let largest = ringmq::config::largest_message_for_segment(TEST_SEGMENT);
    [
        ("mapedFileSizeCommitLog", TEST_SEGMENT.to_string()),
        ("maxMessageSize", largest.to_string()),
    ]
}

/// What carries a test node's connections: `RINGMQ_TEST_NETWORK_IO` (`epoll`, `uring` or
/// `auto`), else epoll. `.ci/run` runs the node suite once more with `uring`.
pub fn test_network_io() -> ringmq::net::NetworkIo {
    match std::env::var("RINGMQ_TEST_NETWORK_IO") {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|error| panic!("RINGMQ_TEST_NETWORK_IO: {error}")),
        Err(_) => ringmq::net::NetworkIo::Epoll,
    }
}

/// The settings of a test node storing into `dir`, built as a user's are (a
/// [`NodeConfig`](ringmq::node_config::NodeConfig) that `node::start` validates): one
/// unpinned shard on free ports of the loopback interface, no metrics endpoint (set
/// `metrics_exporter_type` to `Prom` for one, on a free port), the portable disk backend,
/// the network I/O of [`test_network_io`], [`TEST_SEGMENT`]-byte segments and small
/// IndexFiles and ConsumeQueue files; a test changes what it is about.
pub fn node_config(dir: &std::path::Path) -> ringmq::node_config::NodeConfig {
    let config = ringmq::node_config::NodeConfig {
        store_path_root_dir: dir.into(),
        shards: 1,
        pin_shard_threads: false,
        listen_port: 0,
        namesrv_port: 0,
        metrics_port: 0,
        metrics_exporter_type: ringmq::node_config::MetricsExporter::Disable,
        bind_address: std::net::Ipv4Addr::LOCALHOST.into(),
        io_backend: ringmq::io::IoChoice::Portable,
        network_io: test_network_io(),
        // Small IndexFiles and ConsumeQueue files: both are allocated whole on their first
        // write (420 MB and 6 MB at the defaults), and the suite runs dozens of nodes at once.
        max_hash_slot_num: TEST_INDEX_SLOTS,
        max_index_num: TEST_INDEX_ENTRIES,
        maped_file_size_consume_queue: TEST_CONSUME_QUEUE_FILE,
        ..ringmq::node_config::NodeConfig::default()
    };
    with_segment(config, TEST_SEGMENT)
}

/// `config` with CommitLog segments of `segment` bytes and, since every message must fit
/// one segment (the start refuses a `max_message_size` that does not), the largest
/// message such a segment holds as `max_message_size`.
pub fn with_segment(
    config: ringmq::node_config::NodeConfig,
    segment: u64,
) -> ringmq::node_config::NodeConfig {
    ringmq::node_config::NodeConfig {
        maped_file_size_commit_log: segment,
        max_message_size: ringmq::config::largest_message_for_segment(segment) as usize,
        ..config
    }
}

/// A node started in-process with [`node_config`].
pub fn start_node(dir: &std::path::Path) -> ringmq::node::NodeHandle {
    ringmq::node::start(node_config(dir)).expect("node starts")
}

/// A push consumer's heartbeat: `topic` with `tags`, plus the automatic retry subscription.
pub fn consumer_heartbeat(
    client_id: &str,
    group: &str,
    topic: &str,
    tags: &str,
) -> ringmq::remoting::RemotingCommand {
    let codes: Vec<i32> = if tags == "*" {
        Vec::new()
    } else {
        tags.split("||")
            .map(|tag| properties::java_string_hash(tag.trim()))
            .collect()
    };
    let body = serde_json::json!({
        "clientID": client_id,
        "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
        "consumerDataSet": [{
            "groupName": group,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "unitMode": false,
            "subscriptionDataSet": [
                {"classFilterMode": false, "topic": topic, "subString": tags,
                 "tagsSet": [tags], "codeSet": codes, "subVersion": 1_700_000_000_000_i64,
                 "expressionType": "TAG"},
                {"classFilterMode": false, "topic": format!("%RETRY%{group}"), "subString": "*",
                 "tagsSet": [], "codeSet": [], "subVersion": 1_700_000_000_001_i64,
                 "expressionType": "TAG"}
            ]
        }],
        "heartbeatFingerprint": 0,
        "withoutSub": false
    });
    ringmq::remoting::RemotingCommand::request(
        ringmq::remoting::codes::request::HEART_BEAT,
        ringmq::remoting::ExtFields::new(),
    )
    .with_body(body.to_string())
}

/// Splits a pull response body into its records (fully verified; a blank record, which a
/// pull never returns, fails the test).
pub fn pull_records(body: &[u8]) -> Vec<RecordView<'_>> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        match decode(rest, Verify::Full).expect("a valid record") {
            Decoded::Record(view) => {
                rest = &rest[view.total_size as usize..];
                out.push(view);
            }
            Decoded::Blank { .. } => panic!("a blank record in a pull body"),
        }
    }
    out
}

/// The bodies of a pull response's records, in order, as text.
pub fn pull_bodies(body: &[u8]) -> Vec<String> {
    pull_records(body)
        .iter()
        .map(|record| String::from_utf8(record.body.to_vec()).expect("a text body"))
        .collect()
}

/// A request with `code` and the header fields `fields`.
pub fn command(code: i32, fields: &[(&str, &str)]) -> ringmq::remoting::RemotingCommand {
    let mut ext = ringmq::remoting::ExtFields::new();
    for (key, value) in fields {
        ext.insert((*key).into(), *value);
    }
    ringmq::remoting::RemotingCommand::request(code, ext)
}

/// Creates (or replaces) `topic` with `queues` read and write queues over `raw`.
pub fn create_topic(raw: &mut raw::Raw, topic: &str, queues: u32) {
    let queues = queues.to_string();
    let created = raw.call(command(
        ringmq::remoting::codes::request::UPDATE_AND_CREATE_TOPIC,
        &[
            ("topic", topic),
            ("readQueueNums", &queues),
            ("writeQueueNums", &queues),
            ("perm", "6"),
            ("topicFilterType", "SINGLE_TAG"),
        ],
    ));
    assert_eq!(
        created.code,
        ringmq::remoting::codes::response::SUCCESS,
        "create {topic}: {created:?}"
    );
}

/// Standard base64 with padding, as the Java client encodes batch-ack bitsets (the node
/// only decodes it, in `broker::pop::wire`).
pub fn encode_base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
