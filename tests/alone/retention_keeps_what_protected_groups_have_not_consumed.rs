//! Consumer-aware retention (`retentionProtectedGroups`) on one shard's store and broker,
//! with tiny segments, the simulated disk and time paused and advanced, not waited for:
//! - below `diskSpaceCleanForciblyRatio`, expired segments holding messages a protected
//!   group has not consumed (at or past its committed offset) stay, oldest first with no
//!   hole: the log starts at the segment of the first unconsumed message; once the group
//!   commits past them, the next run deletes them;
//! - an unprotected group's committed offset keeps nothing, nor does a protected group's
//!   offset on a queue this store does not have;
//! - at the forced ratio protected segments go anyway: the messages lost are logged per
//!   group and queue and counted (store stats and the group's metric), the committed
//!   offsets are left as they were, and a pull from one gets PULL_OFFSET_MOVED.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::log::captured;
use common::{as_disk, message, run_local, sim_disk};
use ringmq::broker::tables::consumer_offsets::ConsumerOffsets;
use ringmq::broker::tables::topics::TopicTable;
use ringmq::broker::{requests::pull, state::protected_groups, Broker, BrokerIdentity, NodeTables};
use ringmq::clock::Clock;
use ringmq::config::StoreConfig;
use ringmq::io::sim::SimDisk;
use ringmq::io::Disk;
use ringmq::metrics::ShardMetrics;
use ringmq::node_config::{broker_config, NodeConfig};
use ringmq::remoting::codes::response;
use ringmq::remoting::requests::pull_request;
use ringmq::shard::ShardContext;
use ringmq::store::retention::RetentionConfig;
use ringmq::store::{GetStatus, Store};

/// 2030-01-01T02:00:00Z.
const TWO_AM: i64 = 1_893_463_200_000;
const HOUR: Duration = Duration::from_secs(3600);
const SEGMENT: u64 = 16 * 1024;
const TOPIC: &str = "Old";

fn config(delete_when: Vec<u8>) -> StoreConfig {
    let mut config = StoreConfig::test_min("/store");
    config.commit_log_segment_size = SEGMENT;
    config.max_message_size = 4 * 1024;
    config.consume_queue_entries_per_file = 16;
    config.retention = RetentionConfig {
        file_reserved: HOUR,
        delete_when,
        max_used_percent: 75,
        clean_forcibly_percent: 85,
        warning_percent: 90,
        delete_batch_max: 100,
        // Only the tests' own calls clean.
        clean_interval: Duration::from_secs(100 * 24 * 3600),
    };
    config
}

/// One shard: its store on the simulated disk, and its broker with `groups` protected.
struct Shard {
    store: Store,
    broker: Broker,
    offsets: Arc<ConsumerOffsets>,
    metrics: Arc<ShardMetrics>,
    _tables_dir: tempfile::TempDir,
}

async fn open(sim: &SimDisk, config: StoreConfig, groups: &[&str]) -> Shard {
    let clock = Clock::starting_at(TWO_AM);
    let store = Store::open(config, as_disk(sim), clock).await.unwrap();
    let tables_dir = tempfile::tempdir().unwrap();
    let tables = NodeTables::new(
        TopicTable::load(tables_dir.path(), true, 2).unwrap(),
        ConsumerOffsets::in_memory(tables_dir.path()),
        ringmq::broker::tables::subscription_groups::SubscriptionGroups::load(
            tables_dir.path(),
            true,
        )
        .unwrap(),
    );
    let offsets = tables.consumer_offsets.clone();
    let metrics = Arc::new(ShardMetrics::new(0));
    let node = NodeConfig {
        retention_protected_groups: groups.iter().map(|g| g.to_string()).collect(),
        ..NodeConfig::default()
    };
    let broker = Broker::new(
        store.clone(),
        BrokerIdentity {
            broker_name: "broker-a".into(),
            cluster_name: "DefaultCluster".into(),
            store_host: "127.0.0.1:10911".parse().unwrap(),
        },
        broker_config(&node),
        tables,
        clock,
        ShardContext::single(),
        metrics.clone(),
    );
    protected_groups::protect(&broker);
    Shard {
        store,
        broker,
        offsets,
        metrics,
        _tables_dir: tables_dir,
    }
}

/// Puts `count` 1 KiB messages over queues 0 and 1 of [`TOPIC`].
async fn fill(store: &Store, count: usize) {
    for i in 0..count {
        let body = vec![b'a' + (i % 26) as u8; 1024];
        store
            .put(message(TOPIC, (i % 2) as i32, &body, None, None))
            .await
            .unwrap();
    }
}

fn segment_count(sim: &SimDisk) -> usize {
    Disk::list_dir(sim, std::path::Path::new("/store/commitlog"))
        .unwrap()
        .len()
}

/// The physical offset of the message at `offset` in queue `queue`.
fn phys_of(store: &Store, queue: i32, offset: u64) -> u64 {
    let got = store.get_messages(TOPIC, queue, offset, 1, None).unwrap();
    assert_eq!(got.status, GetStatus::Found, "queue {queue} at {offset}");
    got.messages[0].phys_offset
}

/// The start of the segment holding `phys`.
fn segment_of(phys: u64) -> u64 {
    phys - phys % SEGMENT
}

#[test]
fn expired_segments_a_protected_group_has_not_consumed_stay_until_it_commits_past_them() {
    let _alone = crate::alone();
    let sim = sim_disk(21);
    run_local(true, async {
        let shard = open(&sim, config((0..24).collect()), &["CG_protected"]).await;
        let store = &shard.store;
        fill(store, 200).await;
        // The protected group is behind on queue 0 only; an unprotected one on queue 1.
        shard.offsets.commit("CG_protected", TOPIC, 0, 40);
        shard.offsets.commit("CG_other", TOPIC, 1, 0);
        // Everything closed has expired, and the checkpoint is past it.
        tokio::time::sleep(2 * HOUR).await;
        let before = segment_count(&sim);
        assert!(before >= 12, "{before} segments");

        let floor = phys_of(store, 0, 40);
        let report = store.clean_now().await.unwrap();
        assert_eq!(
            report.log_start,
            segment_of(floor),
            "the log starts at the segment of the first unconsumed message: {report:?}"
        );
        assert_eq!(
            report.segments as u64,
            segment_of(floor) / SEGMENT,
            "{report:?}"
        );
        assert!(report.segments > 0, "{report:?}");
        assert!(report.kept_for_holds > 0, "{report:?}");
        assert_eq!(
            store.retention_stats().segments_kept_for_holds,
            report.kept_for_holds as u64
        );
        assert_eq!(segment_count(&sim), before - report.segments);
        // Queue 0 still serves from the committed offset; queue 1, protected by nobody,
        // lost what lay below the new start.
        assert!(store.min_offset(TOPIC, 0) <= 40);
        assert_eq!(phys_of(store, 0, 40), floor);
        assert!(store.min_offset(TOPIC, 1) > 0);

        // Nothing changed: the next run deletes nothing.
        let again = store.clean_now().await.unwrap();
        assert_eq!(again.segments, 0, "{again:?}");
        assert_eq!(again.kept_for_holds, report.kept_for_holds);

        // The group commits further: the next run deletes up to its new position.
        shard.offsets.commit("CG_protected", TOPIC, 0, 70);
        let floor = phys_of(store, 0, 70);
        let report = store.clean_now().await.unwrap();
        assert_eq!(report.log_start, segment_of(floor), "{report:?}");
        assert!(report.segments > 0, "{report:?}");

        // Everything consumed: only what no hold keeps is left.
        let end = store.max_offset(TOPIC, 0);
        shard.offsets.commit("CG_protected", TOPIC, 0, end as i64);
        let report = store.clean_now().await.unwrap();
        assert!(report.segments > 0, "{report:?}");
        assert_eq!(report.kept_for_holds, 0, "{report:?}");
        assert_eq!(store.retention_stats().segments_kept_for_holds, 0);
        assert!(segment_count(&sim) <= 2, "{} segments", segment_count(&sim));
        assert_eq!(store.retention_stats().messages_lost_from_holds, 0);
        assert_eq!(shard.metrics.unconsumed_lost("CG_protected"), 0);
        store.shutdown().await.unwrap();
    });
}

#[test]
fn an_unprotected_group_keeps_nothing_nor_a_protected_one_on_another_stores_queue() {
    let _alone = crate::alone();
    let sim = sim_disk(22);
    run_local(true, async {
        let shard = open(&sim, config((0..24).collect()), &["CG_protected"]).await;
        let store = &shard.store;
        fill(store, 200).await;
        shard.offsets.commit("CG_other", TOPIC, 0, 0);
        shard.offsets.commit("CG_other", TOPIC, 1, 0);
        // A queue this store has never had (another shard's, D3): no hold here.
        shard.offsets.commit("CG_protected", "Elsewhere", 0, 0);
        tokio::time::sleep(2 * HOUR).await;
        let before = segment_count(&sim);
        let report = store.clean_now().await.unwrap();
        assert!(report.segments >= before - 2, "{report:?} of {before}");
        assert_eq!(report.kept_for_holds, 0, "{report:?}");
        for queue in 0..2 {
            assert!(store.min_offset(TOPIC, queue) > 0, "queue {queue}");
        }
        store.shutdown().await.unwrap();
    });
}

#[test]
fn at_the_forced_ratio_protected_segments_go_and_each_group_and_queue_loss_is_reported() {
    let _alone = crate::alone();
    let log = captured();
    let sim = sim_disk(23);
    run_local(true, async {
        // No deleteWhen hour and nothing expired: only the disk can make it delete.
        let shard = open(&sim, config(vec![]), &["CG_forced"]).await;
        let store = &shard.store;
        fill(store, 200).await;
        shard.offsets.commit("CG_forced", TOPIC, 0, 0);
        shard.offsets.commit("CG_forced", TOPIC, 1, 3);
        // Let the checkpointer record a safe offset past the old segments.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let space = Disk::space(&sim, std::path::Path::new("/store")).unwrap();
        sim.set_capacity(Some((space.total - space.available) * 100 / 92));

        let report = store.clean_now().await.unwrap();
        assert!(report.used_percent >= 85, "{report:?}");
        assert!(report.segments > 0, "forced despite the holds: {report:?}");
        assert_eq!(report.kept_for_holds, 0, "{report:?}");
        let (min0, min1) = (store.min_offset(TOPIC, 0), store.min_offset(TOPIC, 1));
        assert!(min0 > 0 && min1 > 3, "minimums {min0} and {min1}");
        let lost = min0 + (min1 - 3);
        assert_eq!(report.lost_from_holds, lost, "{report:?}");
        assert_eq!(store.retention_stats().messages_lost_from_holds, lost);
        assert_eq!(shard.metrics.unconsumed_lost("CG_forced"), lost);
        shard.metrics.set_store(store.stats());
        let text = ringmq::metrics::render(std::slice::from_ref(&shard.metrics));
        let series = format!(
            "ringmq_retention_unconsumed_lost_total{{shard=\"0\",group=\"CG_forced\"}} {lost}"
        );
        assert!(
            text.lines().any(|l| l == series),
            "no {series:?} in\n{text}"
        );

        // The committed offsets are left as they were; pulling from one is moved.
        assert_eq!(shard.offsets.query("CG_forced", TOPIC, 0), Some(0));
        assert_eq!(shard.offsets.query("CG_forced", TOPIC, 1), Some(3));
        let moved = pull::pull(&shard.broker, &pull_request(TOPIC, 0, 0, 32, None, None)).await;
        assert_eq!(moved.code, response::PULL_OFFSET_MOVED, "{moved:?}");
        let next = moved.ext_fields.get("nextBeginOffset");
        assert_eq!(next, Some(min0.to_string().as_str()), "{moved:?}");

        // One line per group and queue, naming both and the offsets lost.
        let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
        for (queue, from, to) in [(0, 0, min0), (1, 3, min1)] {
            let expected = format!(
                "protected consumer group CG_forced lost {TOPIC} queue {queue} offsets {from}..{to} ({} messages",
                to - from
            );
            let lines = text.lines().filter(|l| l.contains(&expected)).count();
            assert_eq!(lines, 1, "{expected:?} in\n{text}");
        }
    });
}
