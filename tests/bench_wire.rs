//! The wire load generator against a node in-process: produce (sync, async, batch,
//! oneway) stores exactly the messages it reports, consume reads them all back, and the
//! embedded `ringmq bench` reports the same count produced and consumed.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{run_local, start_node, wait_for};
use ringmq::bench::wire::{
    consume, produce, ConsumeOptions, ProduceOptions, ProduceSummary, SendMode,
};
use ringmq::client::{queue_request, Client};
use ringmq::remoting::codes::{request, response};

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
