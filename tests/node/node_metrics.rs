//! The Prometheus endpoint of a running node (D15): after sends and pulls over the
//! remoting protocol, `GET /metrics` shows them per shard: requests by code, responses by
//! status, messages and bytes in and out (zero-copy bytes apart), appends and fsyncs
//! (SYNC_FLUSH), open connections, forwarded requests, and latency summaries.

use crate::common;

use std::time::Duration;

use common::{run_local, scrape_metrics as scrape, wait_for};
use ringmq::client::{send_request_v1, Client};
use ringmq::config::FlushMode;
use ringmq::remoting::codes::response;

const MESSAGES: usize = 24;

/// The sum over shards of a sample whose name and labels start with `prefix`.
fn total(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|line| line.starts_with(prefix))
        .map(|line| line.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

#[test]
fn the_metrics_endpoint_counts_what_the_node_did_per_shard() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = common::node_config(dir.path());
    options.metrics_exporter_type = ringmq::node_config::MetricsExporter::Prom;
    options.shards = 2;
    options.flush_disk_type = FlushMode::Sync;
    let node = ringmq::node::start(options).unwrap();
    let metrics = node.metrics_addr().expect("a metrics endpoint");
    let addr = node.addr();
    let client = run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        for i in 0..MESSAGES {
            let answer = client
                .request(send_request_v1(
                    "Metered",
                    (i % 8) as i32,
                    &[7u8; 100],
                    None,
                    None,
                ))
                .await
                .unwrap();
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        }
        for queue in 0..8 {
            let answer = client.pull("Metered", queue, 0, 32, None).await.unwrap();
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        }
        client
    });

    // The store's counters are sampled once a second: wait for them, with a bound.
    let mut text = String::new();
    wait_for(
        Duration::from_secs(10),
        "stored messages in the metrics",
        || {
            text = scrape(metrics);
            total(&text, "ringmq_messages_in_total{") == MESSAGES as f64
        },
    );
    counts_match_what_the_node_did(&text);
    drop(client);
    node.shutdown().unwrap();
}

/// Every shard has each family; the totals are the sends and pulls made, their bytes
/// (the pulled ones sent from the segment files, D8), the syncs, the one connection and
/// the forwarded requests.
fn counts_match_what_the_node_did(text: &str) {
    let text = text.to_string();
    for shard in ["0", "1"] {
        for family in [
            "ringmq_messages_in_total",
            "ringmq_fsyncs_total",
            "ringmq_connections",
            "ringmq_request_latency_seconds_count",
        ] {
            assert!(
                text.contains(&format!("{family}{{shard=\"{shard}\"")),
                "{family} of shard {shard} missing:\n{text}"
            );
        }
    }
    assert_eq!(
        total(&text, "ringmq_requests_total{"),
        (MESSAGES + 8) as f64
    );
    assert_eq!(
        total(&text, "ringmq_responses_total{"),
        (MESSAGES + 8) as f64,
        "{text}"
    );
    let sends: f64 = text
        .lines()
        .filter(|l| l.starts_with("ringmq_requests_total{") && l.contains("code=\"10\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(sends, MESSAGES as f64);
    // Wire bytes: every body plus its frame and header.
    assert!(total(&text, "ringmq_bytes_in_total{") > (MESSAGES * 100) as f64);
    assert_eq!(total(&text, "ringmq_messages_out_total{"), MESSAGES as f64);
    // The pulled records went out from the segment files (D8): at least every body.
    let zero_copy = total(&text, "ringmq_bytes_out_zero_copy_total{");
    assert!(zero_copy > (MESSAGES * 100) as f64, "{text}");
    assert!(total(&text, "ringmq_bytes_out_total{") > zero_copy);
    let fsyncs = total(&text, "ringmq_fsyncs_total{");
    assert!(
        (1.0..=MESSAGES as f64).contains(&fsyncs),
        "SYNC_FLUSH syncs the log: {fsyncs}"
    );
    assert!(total(&text, "ringmq_appends_total{") >= 1.0);
    assert_eq!(total(&text, "ringmq_connections{"), 1.0, "{text}");
    // One connection lands on one shard: the other shard's queues were forwarded.
    assert!(total(&text, "ringmq_forwarded_total{") >= 1.0, "{text}");
    assert_eq!(
        total(&text, "ringmq_request_latency_seconds_count{"),
        (MESSAGES + 8) as f64
    );
}
