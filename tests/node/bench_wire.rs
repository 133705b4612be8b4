//! The wire load generator against a node in-process: produce (sync, async, batch,
//! oneway; task producers and blocking-thread producers) stores exactly the messages it
//! reports, consume reads them all back and commits its offsets (so the group shows in
//! `ringmq admin consumer-progress`), and the embedded `ringmq bench` reports the same
//! count produced and consumed.

use crate::common;

use std::io::Read;
use std::net::SocketAddr;
use std::time::Duration;

use common::{run_local, start_node, wait_for};
use ringmq::client::{queue_request, Client};
use ringmq::remoting::codes::{request, response};
use ringmq::tools::bench::wire::{
    self, consume, produce, ConsumeOptions, ProduceOptions, ProduceSummary, ProducerIo, SendMode,
};

/// The sum of GET_MAX_OFFSET over queues 0..queues of `topic`.
fn stored(addr: SocketAddr, topic: &str, queues: i32) -> u64 {
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        let mut total = 0;
        for queue in 0..queues {
            let answer = client
                .request(queue_request(request::GET_MAX_OFFSET, topic, queue))
                .await
                .unwrap();
            if answer.code != response::SUCCESS {
                // The topic does not exist yet (oneway sends still on their way).
                continue;
            }
            total += answer.ext_fields["offset"].parse::<u64>().unwrap();
        }
        total
    })
}

fn options(addr: SocketAddr, topic: &str, mode: SendMode, batch: usize) -> ProduceOptions {
    let mut options = ProduceOptions::new(addr);
    options.connections = 2;
    options.producers_per_connection = 2;
    options.topic = topic.into();
    options.mode = mode;
    options.batch = batch;
    options.messages = Some(2_000);
    options
}

fn run_produce(options: ProduceOptions) -> ProduceSummary {
    run_local(false, produce(options)).expect("the produce round runs")
}

fn assert_clean(summary: &ProduceSummary) {
    assert_eq!(summary.messages, 2_000, "{summary:?}");
    assert_eq!(summary.errors, 0, "{summary:?}");
    assert!(summary.errors_by_code.is_empty(), "{summary:?}");
    assert_eq!(summary.producers, 4);
    // The node runs in this process here, so only that the figures are there is checked.
    let per_message = summary
        .loadgen_cpu_us_per_msg
        .expect("CPU per message reported");
    let cores = summary.loadgen_cores.expect("cores reported");
    assert!(per_message.is_finite() && per_message >= 0.0, "{summary:?}");
    assert!(cores.is_finite() && cores >= 0.0, "{summary:?}");
}

#[test]
fn sync_produce_stores_every_message_and_consume_reads_them_back() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let summary = run_produce(options(node.addr(), "SyncTopic", SendMode::Sync, 1));
    assert_clean(&summary);
    assert!(summary.latency.p50_us > 0 && summary.latency.max_us >= summary.latency.p99_us);
    assert_eq!(stored(node.addr(), "SyncTopic", 8), 2_000);

    let mut consume_options = ConsumeOptions::new(node.addr());
    consume_options.topic = "SyncTopic".into();
    consume_options.connections = 2;
    consume_options.messages = Some(2_000);
    consume_options.duration = Some(Duration::from_secs(30));
    let consumed = run_local(false, consume(consume_options)).unwrap();
    assert_eq!(consumed.messages, 2_000, "{consumed:?}");
    assert_eq!(consumed.bytes, 2_000 * 1024);
    assert_eq!(consumed.errors, 0, "{consumed:?}");
    assert!(consumed.latency.max_us > 0);
}

#[test]
fn async_produce_stores_every_message() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let mut options = options(node.addr(), "AsyncTopic", SendMode::Async, 1);
    options.inflight = 8;
    assert_clean(&run_produce(options));
    assert_eq!(stored(node.addr(), "AsyncTopic", 8), 2_000);
}

#[test]
fn batch_produce_stores_every_message() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let summary = run_produce(options(node.addr(), "BatchTopic", SendMode::Sync, 10));
    assert_clean(&summary);
    assert_eq!(summary.batch, 10);
    assert_eq!(stored(node.addr(), "BatchTopic", 8), 2_000);
}

#[test]
fn oneway_produce_delivers_every_message() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let summary = run_produce(options(node.addr(), "OnewayTopic", SendMode::Oneway, 1));
    assert_clean(&summary);
    wait_for(
        Duration::from_secs(30),
        "2,000 oneway messages stored",
        || stored(node.addr(), "OnewayTopic", 8) == 2_000,
    );
    assert_eq!(stored(node.addr(), "OnewayTopic", 8), 2_000);
}

#[test]
fn rate_limit_paces_the_sends() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let mut options = options(node.addr(), "RateTopic", SendMode::Sync, 1);
    options.messages = Some(200);
    options.rate = 1_000;
    let summary = run_produce(options);
    assert_eq!(summary.messages, 200);
    // 200 messages at 1,000/s cannot take less than ~0.2 s.
    assert!(summary.elapsed_s >= 0.19, "{summary:?}");
}

/// One sync producer on each of four connections: what `--io auto` runs on threads.
fn one_sync_producer_per_connection(addr: SocketAddr, topic: &str, batch: usize) -> ProduceOptions {
    let mut options = options(addr, topic, SendMode::Sync, batch);
    options.connections = 4;
    options.producers_per_connection = 1;
    options
}

/// Through `run_produce`, which picks the producers' I/O as `options.io` resolves.
fn run_resolved(options: ProduceOptions) -> ProduceSummary {
    wire::run_produce(options).expect("the produce round runs")
}

#[test]
fn threaded_sync_producers_store_every_message() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let summary = run_resolved(one_sync_producer_per_connection(
        node.addr(),
        "ThreadTopic",
        1,
    ));
    assert_eq!(summary.io, "threads", "{summary:?}");
    assert_clean(&summary);
    assert!(summary.latency.p50_us > 0 && summary.latency.max_us >= summary.latency.p99_us);
    assert!(summary.mb_per_sec > 0.0, "{summary:?}");
    assert_eq!(stored(node.addr(), "ThreadTopic", 8), 2_000);
}

#[test]
fn threaded_batch_producers_store_every_message() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let mut options = one_sync_producer_per_connection(node.addr(), "ThreadBatchTopic", 10);
    options.io = ProducerIo::Threads;
    let summary = run_resolved(options);
    assert_eq!(summary.io, "threads", "{summary:?}");
    assert_clean(&summary);
    assert_eq!(stored(node.addr(), "ThreadBatchTopic", 8), 2_000);
}

#[test]
fn threaded_rate_limit_paces_the_sends() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let mut options = one_sync_producer_per_connection(node.addr(), "ThreadRateTopic", 1);
    options.messages = Some(200);
    options.rate = 1_000;
    let summary = run_resolved(options);
    assert_eq!((summary.io.as_str(), summary.messages), ("threads", 200));
    // 200 messages at 1,000/s cannot take less than ~0.2 s.
    assert!(summary.elapsed_s >= 0.19, "{summary:?}");
}

#[test]
fn threaded_producers_stop_at_the_duration() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let mut options = one_sync_producer_per_connection(node.addr(), "ThreadTimeTopic", 1);
    options.messages = None;
    options.duration = Some(Duration::from_millis(300));
    let summary = run_resolved(options);
    assert_eq!(summary.io, "threads", "{summary:?}");
    assert_eq!(summary.errors, 0, "{summary:?}");
    assert!(summary.messages > 0, "{summary:?}");
    // Each producer finishes the send in flight at the deadline, then stops.
    assert!(
        summary.elapsed_s >= 0.3 && summary.elapsed_s < 5.0,
        "{summary:?}"
    );
    assert_eq!(stored(node.addr(), "ThreadTimeTopic", 8), summary.messages);
}

#[test]
fn auto_io_runs_threads_only_for_one_sync_producer_per_connection() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    let cases = [
        (SendMode::Sync, 1, ProducerIo::Auto, "threads"),
        (SendMode::Sync, 2, ProducerIo::Auto, "tasks"),
        (SendMode::Async, 1, ProducerIo::Auto, "tasks"),
        (SendMode::Oneway, 1, ProducerIo::Auto, "tasks"),
        (SendMode::Sync, 1, ProducerIo::Tasks, "tasks"),
    ];
    for (mode, per_connection, io, expected) in cases {
        let mut options = options(node.addr(), "AutoTopic", mode, 1);
        options.producers_per_connection = per_connection;
        options.io = io;
        options.messages = Some(40);
        let summary = run_resolved(options);
        assert_eq!(
            summary.io, expected,
            "{mode:?} x{per_connection} {io:?}: {summary:?}"
        );
        assert_eq!((summary.messages, summary.errors), (40, 0), "{summary:?}");
    }
    for (mode, per_connection) in [
        (SendMode::Async, 1),
        (SendMode::Oneway, 1),
        (SendMode::Sync, 2),
    ] {
        let mut options = options(node.addr(), "AutoTopic", mode, 1);
        options.producers_per_connection = per_connection;
        options.io = ProducerIo::Threads;
        let error = wire::run_produce(options)
            .expect_err("threads cannot run this")
            .to_string();
        assert!(error.contains("--io threads"), "{error}");
    }
}

#[test]
fn threaded_producer_counts_a_dropped_connection_as_errors_and_finishes() {
    // A peer that takes the first request whole, then closes without answering.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut length = [0u8; 4];
        stream.read_exact(&mut length).unwrap();
        let mut frame = vec![0u8; u32::from_be_bytes(length) as usize];
        stream.read_exact(&mut frame).unwrap();
    });
    let mut options = ProduceOptions::new(addr);
    options.connections = 1;
    options.producers_per_connection = 1;
    options.messages = Some(5);
    options.io = ProducerIo::Threads;
    let summary = run_resolved(options);
    peer.join().unwrap();
    assert_eq!((summary.messages, summary.errors), (0, 5), "{summary:?}");
    // The first send sees the close; the rest fail at once on the broken connection.
    assert_eq!(
        summary.errors_by_code.get("io:ConnectionAborted"),
        Some(&1),
        "{summary:?}"
    );
    assert_eq!(
        summary.errors_by_code.get("io:NotConnected"),
        Some(&4),
        "{summary:?}"
    );
}

#[test]
fn the_embedded_bench_binary_produces_and_consumes_the_same_messages() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ringmq"))
        .args(["bench", "--messages", "2000", "--json", "--quiet"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["produce"]["messages"], 2000, "{summary}");
    assert_eq!(summary["produce"]["errors"], 0, "{summary}");
    assert_eq!(summary["consume"]["messages"], 2000, "{summary}");
    assert_eq!(summary["consume"]["errors"], 0, "{summary}");
}

/// The committed offset of `group` on each of `queues` queues of `topic`, or the response
/// code where there is none.
fn committed(addr: SocketAddr, group: &str, topic: &str, queues: i32) -> Vec<Result<u64, i32>> {
    let (group, topic) = (group.to_string(), topic.to_string());
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        let mut offsets = Vec::new();
        for queue in 0..queues {
            let mut fields = ringmq::remoting::ExtFields::new();
            fields.insert("consumerGroup".into(), group.as_str());
            fields.insert("topic".into(), topic.as_str());
            fields.insert("queueId".into(), queue.to_string());
            let query =
                ringmq::remoting::RemotingCommand::request(request::QUERY_CONSUMER_OFFSET, fields);
            let answer = client.request(query).await.unwrap();
            offsets.push(if answer.code == response::SUCCESS {
                Ok(answer.ext_fields["offset"].parse().unwrap())
            } else {
                Err(answer.code)
            });
        }
        offsets
    })
}

#[test]
fn bench_consume_commits_its_offsets_so_the_group_shows_its_progress() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    assert_clean(&run_produce(options(
        node.addr(),
        "Committed",
        SendMode::Sync,
        1,
    )));
    let mut consume_options = ConsumeOptions::new(node.addr());
    consume_options.topic = "Committed".into();
    consume_options.group = "BenchCommits".into();
    consume_options.messages = Some(2_000);
    consume_options.duration = Some(Duration::from_secs(30));
    let consumed = run_local(false, consume(consume_options)).unwrap();
    assert_eq!(consumed.messages, 2_000, "{consumed:?}");
    let offsets = committed(node.addr(), "BenchCommits", "Committed", 8);
    let total: u64 = offsets
        .iter()
        .map(|o| {
            *o.as_ref()
                .unwrap_or_else(|code| panic!("no commit ({code}): {offsets:?}"))
        })
        .sum();
    // A queue's last batch is committed by its next pull or, at the end, on its own; a
    // task stopped between the two may leave one batch (32) uncommitted.
    assert!(total >= 2_000 - 8 * 32, "{offsets:?}");
}

#[test]
fn bench_produce_with_keys_gives_admin_query_key_something_to_find() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(dir.path());
    for batch in [1, 4] {
        let topic = format!("Keyed{batch}");
        let mut options = options(node.addr(), &topic, SendMode::Sync, batch);
        options.keys = true;
        assert_clean(&run_produce(options));
        let found = std::process::Command::new(env!("CARGO_BIN_EXE_ringmq"))
            .args(["admin", "query-key", "--json", "--topic", &topic])
            .args(["--key", &wire::bench_key(1_234)])
            .arg("--namesrv")
            .arg(node.namesrv_addr().to_string())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&found.stdout);
        assert!(
            found.status.success() && stdout.contains("bench-1234"),
            "batch {batch}: {found:?}"
        );
    }
}
