//! Rates and operator metrics of a running node of two shards (issue 23, items 9 and 11):
//! after sends, pulls and a commit, GET_BROKER_RUNTIME_INFO's `putTps` and
//! `getTransferredTps`, GET_TOPIC_STATS_INFO's `topicPutTps` and GET_CONSUME_STATS's
//! `consumeTps` are above 0, and `/metrics` shows the topic's and the group's messages and
//! bytes, the group's lag, the CommitLog's figures, `ringmq_build_info`, the process
//! figures and the latency histogram, as valid Prometheus text; `/health` answers 200.
//!
//! The exact rates are the unit tests' (`metrics::rates`, with made-up times); here the
//! node's own clock runs, so only "measured, not 0" is asserted. The per-key figures are
//! sampled every 10 s, as Java's `StatsItem` does: the test waits up to 20 s for them.

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::command;
use common::raw::Raw;
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::requests::{pull_request, send_request_v1};
use ringmq::remoting::RemotingCommand;

const TOPIC: &str = "Rated";
const QUEUES: i32 = 4;
const PER_QUEUE: i64 = 10;
const GROUP: &str = "rated-group";
/// Queue 0's commit: the lag is the rest of queue 0 and every other queue whole.
const COMMITTED: i64 = 4;

fn get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}

fn scrape(addr: SocketAddr) -> String {
    let text = get(addr, "/metrics");
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    text.split_once("\r\n\r\n").unwrap().1.to_owned()
}

/// The value of the sample named exactly `series` (name and labels), if there is one.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|value| value.parse().unwrap())
}

/// The sum over every sample whose name and labels start with `prefix`.
fn total(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|line| line.starts_with(prefix))
        .map(|line| line.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

/// The text format's rules the scrapers rely on: every sample's family has HELP and TYPE
/// before it, a histogram's samples are `_bucket` with `le`, `_sum` and `_count`, no
/// series appears twice, label values are quoted, and every value is a number.
fn check_exposition(text: &str) {
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut helped = HashSet::new();
    let mut series = HashSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.insert(rest.split(' ').next().unwrap().to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(
                types.insert(name.to_owned(), kind.to_owned()).is_none(),
                "{name} typed twice"
            );
            assert!(helped.contains(name), "{name} has no HELP before its TYPE");
            continue;
        }
        let (key, value) = line.rsplit_once(' ').unwrap();
        assert!(
            value == "+Inf" || value.parse::<f64>().is_ok(),
            "not a number: {line}"
        );
        assert!(series.insert(key.to_owned()), "a series twice: {line}");
        let name = key.split('{').next().unwrap();
        if let Some(labels) = key.strip_prefix(name) {
            if !labels.is_empty() {
                assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
                for pair in labels[1..labels.len() - 1].split("\",") {
                    let (label, quoted) = pair.split_once('=').unwrap();
                    assert!(
                        label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                        "{line}"
                    );
                    assert!(quoted.starts_with('"'), "{line}");
                }
            }
        }
        let family = types
            .get(name)
            .map(|kind| (name, kind.as_str()))
            .or_else(|| {
                ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
                    let base = name.strip_suffix(suffix)?;
                    types.get(base).map(|kind| (base, kind.as_str()))
                })
            });
        let Some((base, kind)) = family else {
            panic!("a sample of no announced family: {line}");
        };
        if kind == "histogram" {
            assert!(name != base, "a histogram sample without a suffix: {line}");
            assert_eq!(name.ends_with("_bucket"), key.contains("le=\""), "{line}");
        }
    }
}

/// The first figure of a Java TPS text (`"12.5 11.0 10.2"`).
fn first_figure(table: &serde_json::Value, key: &str) -> f64 {
    let text = table[key]
        .as_str()
        .unwrap_or_else(|| panic!("no {key} in {table}"));
    let figures: Vec<f64> = text.split(' ').map(|f| f.parse().unwrap()).collect();
    assert_eq!(figures.len(), 3, "{key}: {text}");
    figures[0]
}

/// A number field of a fastjson body (its queue-object keys are not JSON).
fn number_field(answer: &RemotingCommand, field: &str) -> f64 {
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    let text = String::from_utf8_lossy(&answer.body);
    let at = text
        .find(&format!("\"{field}\":"))
        .unwrap_or_else(|| panic!("no {field} in {text}"));
    let rest = &text[at + field.len() + 3..];
    let end = rest.find([',', '}']).unwrap();
    rest[..end].parse().unwrap()
}

/// The topic with `PER_QUEUE` 100-byte messages in each queue, each queue pulled once
/// by the group, and `COMMITTED` committed on queue 0.
fn send_pull_and_commit(raw: &mut Raw) {
    common::create_topic(raw, TOPIC, QUEUES as u32);
    for queue in 0..QUEUES {
        for i in 0..PER_QUEUE {
            let body = format!("{queue}/{i:0>98}");
            let answer = raw.call(send_request_v1(TOPIC, queue, body.as_bytes(), None, None));
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        }
        let mut pull = pull_request(TOPIC, queue, 0, 32, None, None);
        pull.put_ext("consumerGroup", GROUP);
        let answer = raw.call(pull);
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
    }
    let answer = raw.call(command(
        request::UPDATE_CONSUMER_OFFSET,
        &[
            ("consumerGroup", GROUP),
            ("topic", TOPIC),
            ("queueId", "0"),
            ("commitOffset", &COMMITTED.to_string()),
        ],
    ));
    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
}

/// The per-key series, the store and process gauges, and the latency histogram hold
/// what the node did: `messages` sent and pulled.
fn operator_metrics_hold_what_was_done(text: &str, messages: i64) {
    let pair = format!("group=\"{GROUP}\",topic=\"{TOPIC}\"");
    let topic = format!("topic=\"{TOPIC}\"");
    let expect = [
        (
            format!("ringmq_topic_messages_in_total{{{topic}}}"),
            messages as f64,
        ),
        (
            format!("ringmq_topic_messages_out_total{{{topic}}}"),
            messages as f64,
        ),
        (
            format!("ringmq_group_messages_out_total{{{pair}}}"),
            messages as f64,
        ),
        (
            format!("ringmq_consumer_lag_messages{{{pair}}}"),
            (messages - COMMITTED) as f64,
        ),
    ];
    for (series, value) in &expect {
        assert_eq!(sample(text, series), Some(*value), "{series} in\n{text}");
    }
    // Every record holds its 100-byte body and its headers.
    for family in [
        "ringmq_topic_bytes_in_total",
        "ringmq_topic_bytes_out_total",
    ] {
        let bytes = sample(text, &format!("{family}{{{topic}}}")).unwrap();
        assert!(bytes > (messages * 100) as f64, "{family} {bytes}");
    }
    assert!(total(text, "ringmq_store_size_bytes{") > 0.0, "{text}");
    assert!(total(text, "ringmq_commitlog_max_offset{") > (messages * 100) as f64);
    assert_eq!(total(text, "ringmq_stats_keys_over_cap{"), 0.0);
    assert!(text.contains("ringmq_build_info{version=\""), "{text}");
    assert!(sample(text, "process_resident_memory_bytes").unwrap() > 0.0);
    assert!(sample(text, "process_open_fds").unwrap() > 0.0);
    // The latency histogram: every send in the +Inf bucket, summed over the shards.
    assert_eq!(
        total(text, "ringmq_request_latency_seconds_count{")
            - text
                .lines()
                .filter(|l| {
                    l.starts_with("ringmq_request_latency_seconds_count{")
                        && !l.contains("family=\"send\"")
                })
                .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
                .sum::<f64>(),
        messages as f64
    );
    let sends_in_inf: f64 = text
        .lines()
        .filter(|l| {
            l.starts_with("ringmq_request_latency_seconds_bucket{")
                && l.contains("family=\"send\"")
                && l.contains("le=\"+Inf\"")
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(sends_in_inf, messages as f64);
    // Codes by name as well as number.
    assert!(
        text.contains("code=\"10\",name=\"SEND_MESSAGE\"}"),
        "{text}"
    );
}

#[test]
fn the_node_measures_rates_and_shows_operator_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = common::node_config(dir.path());
    options.shards = 2;
    options.metrics_exporter_type = ringmq::node_config::MetricsExporter::Prom;
    let node = ringmq::node::start(options).unwrap();
    let metrics = node.metrics_addr().expect("a metrics endpoint");
    let health = get(metrics, "/health");
    assert!(health.starts_with("HTTP/1.1 200 OK"), "{health}");
    assert!(
        health.ends_with("ready: 2 of 2 shards serving\n"),
        "{health}"
    );

    let messages = QUEUES as i64 * PER_QUEUE;
    let mut raw = Raw::connect(node.addr());
    send_pull_and_commit(&mut raw);
    // The broker's rates: sampled every second.
    common::wait_for(Duration::from_secs(10), "putTps above 0", || {
        let answer = raw.call(command(request::GET_BROKER_RUNTIME_INFO, &[]));
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        let info: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
        let table = &info["table"];
        for key in [
            "getFoundTps",
            "getMissTps",
            "getTotalTps",
            "getTransferedTps",
        ] {
            first_figure(table, key);
        }
        first_figure(table, "putTps") > 0.0 && first_figure(table, "getTransferredTps") > 0.0
    });

    // The per-key figures: sampled every 10 s.
    let mut text = String::new();
    common::wait_for(
        Duration::from_secs(25),
        "the topic's and the group's figures",
        || {
            let stats = raw.call(command(request::GET_TOPIC_STATS_INFO, &[("topic", TOPIC)]));
            let progress = raw.call(command(
                request::GET_CONSUME_STATS,
                &[("consumerGroup", GROUP), ("topic", TOPIC)],
            ));
            text = scrape(metrics);
            number_field(&stats, "topicPutTps") > 0.0
                && number_field(&progress, "consumeTps") > 0.0
                // Each shard samples on its own clock: wait for both.
                && sample(
                    &text,
                    &format!("ringmq_consumer_lag_messages{{group=\"{GROUP}\",topic=\"{TOPIC}\"}}"),
                ) == Some((messages - COMMITTED) as f64)
        },
    );
    check_exposition(&text);
    operator_metrics_hold_what_was_done(&text, messages);
    node.shutdown().unwrap();
}
