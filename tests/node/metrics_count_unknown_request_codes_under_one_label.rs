//! Request codes the node does not know are counted under one label (issue 10, defect 5):
//! 10,000 distinct unknown codes sent to a running node leave `/metrics` under
//! `SIZE_BOUND` bytes, and the `code="unknown"` counter equals the number sent. Before, each
//! code got its own series, so the page grew by a line per distinct code a peer made up.

use crate::common;

use common::{metric_sample as sample, run_local, scrape_metrics as scrape};
use ringmq::client::Client;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::command::RemotingCommand;
use ringmq::remoting::ext_fields::ExtFields;

/// Distinct unknown codes sent.
const CODES: i32 = 10_000;

/// The bound on the page after them: a one-shard node's page is about 21 KiB (the latency
/// histograms' buckets are a third of it), and a series per code would add about 50 bytes
/// each (500 KB for these).
const SIZE_BOUND: usize = 32 * 1024;

#[test]
fn ten_thousand_unknown_request_codes_keep_the_metrics_page_small_and_are_all_counted() {
    // Codes 40000..50000: neither RocketMQ nor ringmq defines one (the test says so if that
    // changes; 1001-1013 became known with the controller's requests).
    let codes = 40_000..40_000 + CODES;
    for code in codes.clone() {
        assert_eq!(request::name(code), None, "{code} is a known request code");
    }
    let dir = tempfile::tempdir().unwrap();
    let mut options = common::node_config(dir.path());
    options.metrics_exporter_type = ringmq::node_config::MetricsExporter::Prom;
    options.shards = 1;
    let node = ringmq::node::start(options).unwrap();
    let metrics = node.metrics_addr().expect("a metrics endpoint");
    let before = scrape(metrics).len();
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        for code in codes {
            let answer = client
                .request(RemotingCommand::request(code, ExtFields::default()))
                .await
                .unwrap();
            assert_eq!(
                answer.code,
                response::REQUEST_CODE_NOT_SUPPORTED,
                "{code}: {answer:?}"
            );
        }
    });
    let text = scrape(metrics);
    eprintln!(
        "/metrics: {before} bytes before, {} after {CODES} unknown codes",
        text.len()
    );
    assert_eq!(
        sample(
            &text,
            "ringmq_requests_total{shard=\"0\",code=\"unknown\",name=\"unknown\"}"
        ),
        CODES as u64
    );
    assert_eq!(
        sample(
            &text,
            "ringmq_responses_total{shard=\"0\",status=\"3\",name=\"REQUEST_CODE_NOT_SUPPORTED\"}"
        ),
        CODES as u64
    );
    assert!(
        text.len() < SIZE_BOUND,
        "/metrics grew from {before} to {} bytes",
        text.len()
    );
    assert_eq!(node.metrics().shard(0).unknown_requests(), CODES as u64);
    node.shutdown().unwrap();
}
