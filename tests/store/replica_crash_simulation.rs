//! Crashes of a replica's simulated disk while it takes its master's log in random frame
//! splits (`store/replica.rs`). After each crash the replica recovers to whole records
//! only: its log is a byte prefix of the master's, every queue entry and key it serves
//! is the master's, and nothing past its recovered end is served; then it truncates to
//! that end (the HA stream's handshake) and goes on, ending byte-identical.
//!
//! A failure names its seed;
//! `RINGMQ_SIM_SEEDS=START..END cargo test --test store replica_crash_simulation::` sweeps
//! other seeds (the default run takes a handful).

use crate::common;

use common::{as_disk, run_local, sim_disk, Rng};
use ringmq::config::{BrokerRole, FlushMode};
use ringmq::store::{OpenKind, Store};

use super::replica_stream::{
    assert_byte_identical, config, for_seeds, keys, open, put_some, stream,
};

/// The replica's log from its start to its recovered end equals the master's there, and
/// every queue entry it serves is the master's entry at the same offset, below its end.
fn assert_prefix(master: &Store, replica: &Store, context: &str) {
    let (start, end) = (replica.log_start(), replica.log_positions().written);
    let mut at = start;
    while at < end {
        let len = (replica.segment_base_of(at) + replica.segment_size()).min(end) - at;
        assert_eq!(
            replica.read_log(at, len as usize).unwrap(),
            master.read_log(at, len as usize).unwrap(),
            "{context}: the replica's log differs from the master's in [{at}, {})",
            at + len
        );
        at += len;
    }
    for (topic, queue_id) in replica.queues() {
        let (min, max) = (
            replica.min_offset(&topic, queue_id),
            replica.max_offset(&topic, queue_id),
        );
        let ours = replica
            .queue_entries(&topic, queue_id, min, 10_000)
            .unwrap();
        let theirs = master
            .queue_entries(&topic, queue_id, min, ours.len())
            .unwrap();
        assert_eq!(ours, theirs, "{context}: entries of {topic}/{queue_id}");
        assert_eq!(ours.len() as u64, max - min);
        if let Some(last) = ours.last() {
            assert!(
                last.phys_offset as u64 + last.size as u64 <= end,
                "{context}: {topic}/{queue_id} serves a record past the end {end}"
            );
        }
    }
}

#[test]
fn a_replica_crashing_mid_stream_recovers_whole_records_and_goes_on() {
    for_seeds(0..6, "replica crash simulation", |seed| {
        let mut rng = Rng::new(seed);
        let flush = if rng.chance(50) {
            FlushMode::Sync
        } else {
            FlushMode::Async
        };
        let (master_sim, replica_sim) = (sim_disk(seed), sim_disk(seed ^ 0x5eed));
        let master_config = config("/master", BrokerRole::AsyncMaster, flush);
        let mut replica_config = config("/replica", BrokerRole::Slave, flush);
        replica_config.checkpoint_interval = std::time::Duration::from_millis(rng.range(5, 100));
        replica_config.flush_interval = std::time::Duration::from_millis(rng.range(5, 50));
        run_local(true, async {
            let master = open(&master_sim, &master_config).await;
            put_some(&master, &mut rng, 150, "c").await;
            for life in 0..rng.range(2, 5) {
                let replica = open(&replica_sim, &replica_config).await;
                if life > 0 {
                    assert!(
                        matches!(replica.opened(), OpenKind::Recovered { .. }),
                        "life {life}: {:?}",
                        replica.opened()
                    );
                }
                assert_prefix(&master, &replica, &format!("life {life} recovered"));
                // The handshake: cut to what survived, then go on from there.
                let end = replica.replica_progress().records_end;
                replica.truncate_replica(end).await.unwrap();
                replica_sim.crash_after_ops(rng.range(1, 60));
                loop {
                    let next = replica.replica_progress().next_at;
                    let cap = rng.range(1, 3000) as usize;
                    let Some(range) = master.replica_range(next, cap).unwrap() else {
                        break;
                    };
                    if replica
                        .append_replica(range.start, range.bytes)
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
                if !replica_sim.is_crashed() {
                    replica_sim.crash_now();
                }
                replica_sim.restart();
            }
            // A last life without a crash catches up and ends identical.
            let replica = open(&replica_sim, &replica_config).await;
            assert_prefix(&master, &replica, "last life recovered");
            let end = replica.replica_progress().records_end;
            replica.truncate_replica(end).await.unwrap();
            stream(&master, &replica, &mut rng).await;
            assert_byte_identical(
                &*as_disk(&master_sim),
                "/master",
                &*as_disk(&replica_sim),
                "/replica",
                "caught up",
            );
            super::replica_stream::assert_same_answers(
                &master,
                &replica,
                &keys("c", 150),
                "caught up",
            );
            replica.shutdown().await.unwrap();
            master.shutdown().await.unwrap();
        });
    });
}
