//! The delivery benchmarks against a node in-process, small: `ringmq bench delayed` and
//! `ringmq bench timers` receive every message they sent, none early, none twice, with
//! due times for all of them; `ringmq bench send-back` hands back every stored message and
//! finds each copy scheduled. Guards the benchmark's bookkeeping, not the node's speed.

use crate::common;

use std::time::Duration;

use ringmq::broker::delay::DelayLevels;
use ringmq::tools::bench::delivery::{
    run_delivery, run_send_back, DeliveryOptions, DeliverySummary, SendBackOptions, Waiting,
};

const LEVELS: &str = "100ms 300ms";

fn start(dir: &std::path::Path) -> ringmq::node::NodeHandle {
    let mut options = common::node_config(dir);
    options.message_delay_level = DelayLevels::parse(LEVELS).unwrap();
    options.timer_max_delay_sec = 60;
    ringmq::node::start(options).expect("node starts")
}

fn delivery_options(addr: std::net::SocketAddr, waiting: Waiting, topic: &str) -> DeliveryOptions {
    DeliveryOptions {
        addr,
        waiting,
        messages: 600,
        size: 32,
        topic: topic.into(),
        queues: 3,
        connections: 2,
        inflight: 8,
        grace: Duration::from_secs(20),
        node_pid: Some(std::process::id()),
        progress: false,
    }
}

fn assert_all_delivered(summary: &DeliverySummary) {
    assert_eq!(summary.send.messages, 600, "{summary:#?}");
    assert_eq!(summary.send.errors, 0, "{summary:#?}");
    assert_eq!(summary.delivered, 600, "{summary:#?}");
    assert_eq!(
        (summary.missing, summary.duplicates, summary.foreign),
        (0, 0, 0),
        "{summary:#?}"
    );
    assert_eq!(
        (summary.no_due, summary.due_mismatch),
        (0, 0),
        "{summary:#?}"
    );
    assert_eq!(summary.lateness_store.count, 600, "{summary:#?}");
    assert_eq!(summary.lateness_store.early, 0, "never early: {summary:#?}");
    assert!(summary.lateness_receipt.min_ms >= 0, "{summary:#?}");
    assert!(summary.node_memory.vmhwm_kb.is_some_and(|kb| kb > 0));
    assert!(summary.node_memory.anon_sampled_peak_kb.is_some());
}

#[test]
fn delayed_and_timer_runs_account_for_every_message() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path());
    let levels = DelayLevels::parse(LEVELS).unwrap();
    let delayed = run_delivery(delivery_options(
        node.addr(),
        Waiting::Delay { levels },
        "DelayBenchTest",
    ))
    .expect("the delayed run runs");
    assert_all_delivered(&delayed);
    assert_eq!(delayed.kind, "delay");
    let per_level: Vec<(u32, u64)> = delayed
        .per_level
        .iter()
        .map(|level| (level.level, level.lateness.count))
        .collect();
    assert_eq!(per_level, [(1, 300), (2, 300)], "levels in turn");

    let timers = run_delivery(delivery_options(
        node.addr(),
        Waiting::Timer {
            lead: Duration::from_millis(500),
            span: Duration::from_millis(500),
        },
        "TimerBenchTest",
    ))
    .expect("the timer run runs");
    assert_all_delivered(&timers);
    assert_eq!(timers.kind, "timer");
    node.shutdown().unwrap();
}

#[test]
fn send_back_hands_back_every_stored_message() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path());
    let summary = run_send_back(SendBackOptions {
        addr: node.addr(),
        messages: 500,
        size: 32,
        topic: "SendBackBenchTest".into(),
        queues: 3,
        connections: 2,
        inflight: 8,
        group: "send-back-bench-test".into(),
        delay_level: 0,
        node_pid: None,
        progress: false,
    })
    .expect("the send-back run runs");
    assert_eq!(summary.plain.messages, 500, "{summary:#?}");
    assert_eq!(summary.send_back.messages, 500, "{summary:#?}");
    assert_eq!(summary.plain.errors + summary.send_back.errors, 0);
    assert_eq!(
        summary.scheduled_copies, 500,
        "each copy waits at a delay level"
    );
    assert!(summary.ratio > 0.0);
    node.shutdown().unwrap();
}
