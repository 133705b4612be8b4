//! Retention through a running node: with `fileReservedTime=0` and every hour a
//! `deleteWhen` hour, closed segments go at the cleaner's next run; a consumer pulling
//! below the queue's new minimum gets PULL_OFFSET_MOVED with the minimum as its next
//! offset, and pulling from there serves what is left; GET_MIN_OFFSET reports it; a
//! committed offset below it stays as it was committed. With the consumer group
//! protected (`retentionProtectedGroups`), the same segments stay while the group's
//! committed offset is in them, and go once it commits past them. A delayed message
//! waiting for its level keeps its segment (and the ones after it) likewise.

use crate::common;

use std::time::{Duration, Instant};

use common::run_local;
use ringmq::client::{queue_request, send_request_v1, Client};
use ringmq::remoting::codes::{request, response};
use ringmq::remoting::{ExtFields, RemotingCommand};

const TOPIC: &str = "Expiring";
const GROUP: &str = "CG_expiring";

fn ext<'a>(cmd: &'a RemotingCommand, field: &str) -> &'a str {
    cmd.ext_fields
        .get(field)
        .unwrap_or_else(|| panic!("no {field} in {cmd:?}"))
}

/// A node with 64 KiB segments whose cleaner runs every 50 ms and finds every closed
/// segment expired, with `protected` consumer groups.
fn expiring_node(dir: &std::path::Path, protected: &[&str]) -> ringmq::node::NodeHandle {
    expiring_node_with(dir, protected, |_| {})
}

/// [`expiring_node`], with `adjust` applied to its options before the start.
fn expiring_node_with(
    dir: &std::path::Path,
    protected: &[&str],
    adjust: impl FnOnce(&mut ringmq::node_config::NodeConfig),
) -> ringmq::node::NodeHandle {
    let mut options = common::with_segment(common::node_config(dir), 64 * 1024);
    options.shards = 1;
    options.retention_protected_groups = protected.iter().map(|g| g.to_string()).collect();
    options.file_reserved_time = Duration::ZERO;
    options.delete_when = (0..24).collect();
    options.clean_resource_interval = Duration::from_millis(50);
    // Expiry by time is under test, not disk pressure: the host's own disk use (this
    // one's reads 80% with its reserved blocks) must not force deletions past holds.
    // (95 is the key's bound; with every hour a deletion hour, the ratio at which
    // expired segments go at any hour changes nothing.)
    options.disk_max_used_space_ratio = 95;
    options.disk_space_clean_forcibly_ratio = 100;
    options.disk_space_warning_level_ratio = 100;
    options.flush_interval_consume_queue = Duration::from_millis(50);
    adjust(&mut options);
    ringmq::node::start(options).expect("node starts")
}

/// The value of the sample `series` (name and labels) in a scrape of `node`.
fn sample(node: &ringmq::node::NodeHandle, series: &str) -> Option<u64> {
    let text = node.metrics().render();
    let line = text.lines().find(|line| line.starts_with(series))?;
    line.rsplit(' ').next()?.parse().ok()
}

async fn min_offset(client: &Client) -> u64 {
    let answer = client
        .request(queue_request(request::GET_MIN_OFFSET, TOPIC, 0))
        .await
        .unwrap();
    ext(&answer, "offset").parse().unwrap()
}

fn offset_request(code: i32, commit: Option<i64>) -> RemotingCommand {
    let mut fields = ExtFields::new();
    fields.insert("consumerGroup".into(), GROUP);
    fields.insert("topic".into(), TOPIC);
    fields.insert("queueId".into(), "0");
    if let Some(offset) = commit {
        fields.insert("commitOffset".into(), offset.to_string());
    }
    RemotingCommand::request(code, fields)
}

#[test]
fn a_consumer_behind_expired_segments_is_moved_to_the_new_minimum() {
    let dir = tempfile::tempdir().unwrap();
    let node = expiring_node(dir.path(), &[]);
    let addr = node.addr();
    run_local(false, async move {
        let client = Client::connect(addr).await.unwrap();
        let commit = client
            .request(offset_request(request::UPDATE_CONSUMER_OFFSET, Some(0)))
            .await
            .unwrap();
        assert_eq!(commit.code, response::SUCCESS, "{commit:?}");
        let body = vec![b'r'; 1024];
        for _ in 0..300 {
            let answer = client
                .request(send_request_v1(TOPIC, 0, &body, None, None))
                .await
                .unwrap();
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        }
        // Bounded wait for the cleaner (every 50 ms) to move the queue's minimum.
        let deadline = Instant::now() + Duration::from_secs(20);
        let min = loop {
            let answer = client
                .request(queue_request(request::GET_MIN_OFFSET, TOPIC, 0))
                .await
                .unwrap();
            let min: u64 = ext(&answer, "offset").parse().unwrap();
            if min > 0 {
                break min;
            }
            assert!(Instant::now() < deadline, "the minimum never moved");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let moved = client.pull(TOPIC, 0, 0, 32, None).await.unwrap();
        assert_eq!(moved.code, response::PULL_OFFSET_MOVED, "{moved:?}");
        let next: u64 = ext(&moved, "nextBeginOffset").parse().unwrap();
        assert!(next >= min, "next {next} below the minimum {min}");
        let kept = client.pull(TOPIC, 0, next, 32, None).await.unwrap();
        assert_eq!(kept.code, response::SUCCESS, "{kept:?}");
        assert!(!common::pull_records(&kept.body).is_empty());
        let committed = client
            .request(offset_request(request::QUERY_CONSUMER_OFFSET, None))
            .await
            .unwrap();
        assert_eq!(committed.code, response::SUCCESS, "{committed:?}");
        assert_eq!(
            ext(&committed, "offset"),
            "0",
            "the committed offset is kept"
        );
    });
    node.shutdown().unwrap();
}

#[test]
fn a_protected_group_keeps_the_segments_it_has_not_consumed_until_it_commits_past_them() {
    let dir = tempfile::tempdir().unwrap();
    let node = expiring_node(dir.path(), &[GROUP]);
    let addr = node.addr();
    let kept = "ringmq_retention_segments_kept_for_consumers{shard=\"0\"}";
    run_local(false, async {
        let client = Client::connect(addr).await.unwrap();
        let commit = client
            .request(offset_request(request::UPDATE_CONSUMER_OFFSET, Some(0)))
            .await
            .unwrap();
        assert_eq!(commit.code, response::SUCCESS, "{commit:?}");
        let body = vec![b'r'; 1024];
        for _ in 0..300 {
            let answer = client
                .request(send_request_v1(TOPIC, 0, &body, None, None))
                .await
                .unwrap();
            assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        }
        // Bounded wait for a cleaner run to report segments kept for the group (the
        // metrics copy the store's figures once a second).
        let deadline = Instant::now() + Duration::from_secs(20);
        while sample(&node, kept).unwrap_or(0) == 0 {
            assert!(
                Instant::now() < deadline,
                "no segment was ever kept for the group"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            min_offset(&client).await,
            0,
            "the group's messages were deleted"
        );
        let all = client
            .request(queue_request(request::GET_MAX_OFFSET, TOPIC, 0))
            .await
            .unwrap();
        let end: i64 = ext(&all, "offset").parse().unwrap();
        assert_eq!(end, 300);
        let commit = client
            .request(offset_request(request::UPDATE_CONSUMER_OFFSET, Some(end)))
            .await
            .unwrap();
        assert_eq!(commit.code, response::SUCCESS, "{commit:?}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while min_offset(&client).await == 0 {
            assert!(
                Instant::now() < deadline,
                "the minimum never moved after the commit"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while sample(&node, kept) != Some(0) {
            assert!(Instant::now() < deadline, "segments still counted as kept");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let lost = "ringmq_retention_unconsumed_lost_total{shard=\"0\",group=\"CG_expiring\"}";
        assert_eq!(sample(&node, lost), Some(0), "nothing was lost");
    });
    node.shutdown().unwrap();
}

#[test]
fn a_bad_protected_group_name_stops_the_start_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let mut options = common::node_config(dir.path());
    options.retention_protected_groups = vec!["CG ok".into()];
    let error = ringmq::node::start(options).err().expect("refused");
    let message = format!("{error:#}");
    assert!(
        message.contains("retention_protected_groups") && message.contains("CG ok"),
        "{message}"
    );
}

/// A delayed message waiting for its level (1 h here) holds its segment: retention
/// deletes the segments before it and stops there, so the message is still in
/// `SCHEDULE_TOPIC_XXXX` for its scheduler, while the plain messages after it stay too.
#[test]
fn a_waiting_delayed_message_keeps_its_segment_until_it_is_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let node = expiring_node_with(dir.path(), &[], |options| {
        options.message_delay_level = ringmq::broker::delay::DelayLevels::parse("1h").unwrap();
    });
    let addr = node.addr();
    run_local(false, async {
        let client = Client::connect(addr).await.unwrap();
        let body = vec![b'r'; 1024];
        let send_plain = |count: usize| {
            let client = &client;
            let body = &body;
            async move {
                for _ in 0..count {
                    let answer = client
                        .request(send_request_v1(TOPIC, 0, body, None, None))
                        .await
                        .unwrap();
                    assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
                }
            }
        };
        send_plain(150).await;
        let mut delayed = send_request_v1(TOPIC, 0, b"due in an hour", None, None);
        let properties = format!("{}DELAY\u{1}1\u{2}", ext(&delayed, "properties"));
        delayed.put_ext("properties", properties);
        let answer = client.request(delayed).await.unwrap();
        assert_eq!(answer.code, response::SUCCESS, "{answer:?}");
        send_plain(150).await;

        // Bounded wait for the cleaner to delete the segments before the delayed message.
        let deadline = Instant::now() + Duration::from_secs(20);
        while min_offset(&client).await == 0 {
            assert!(
                Instant::now() < deadline,
                "retention never deleted a segment"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // A few more runs: none goes past the delayed message's segment.
        let kept = "ringmq_retention_segments_kept_for_consumers{shard=\"0\"}";
        let deadline = Instant::now() + Duration::from_secs(20);
        while sample(&node, kept).unwrap_or(0) == 0 {
            assert!(
                Instant::now() < deadline,
                "no segment was kept for the delay"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let plain_min = min_offset(&client).await;
        assert!(
            plain_min <= 150,
            "plain messages stored after the delayed one were deleted (min {plain_min})"
        );
        let schedule = "SCHEDULE_TOPIC_XXXX";
        let waiting = client
            .request(queue_request(request::GET_MIN_OFFSET, schedule, 0))
            .await
            .unwrap();
        assert_eq!(ext(&waiting, "offset"), "0", "{waiting:?}");
        let pulled = client.pull(schedule, 0, 0, 1, None).await.unwrap();
        assert_eq!(pulled.code, response::SUCCESS, "{pulled:?}");
        let records = common::pull_records(&pulled.body);
        assert_eq!(records[0].body, b"due in an hour");
    });
    node.shutdown().unwrap();
}
