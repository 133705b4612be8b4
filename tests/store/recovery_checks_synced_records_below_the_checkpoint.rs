//! Crash recovery reads again the records of the last segment below the checkpoint's safe
//! offset (they were synced, so no torn write explains damage there; a disk or a hand
//! does). A replica's log damaged there, by a flipped bit or by zeros, recovers from the
//! first damaged record, so its master streams the rest again; a master's open fails
//! naming the offset and deletes nothing. An undamaged log still recovers whole.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use common::{as_disk, message, run_local, sim_disk};
use ringmq::clock::Clock;
use ringmq::config::{BrokerRole, FlushMode, StoreConfig};
use ringmq::io::sim::SimDisk;
use ringmq::store::segment::segment_name;
use ringmq::store::{OpenKind, Placement, Store, StoreError, COMMIT_LOG_DIR};

const MESSAGES: usize = 8;
/// The record damaged in each test; it and every later one are below the safe offset.
const VICTIM: usize = 5;

fn config(role: BrokerRole) -> StoreConfig {
    let mut config = StoreConfig::test_min("/store");
    config.flush_mode = FlushMode::Sync;
    config.broker_role = role;
    config.checkpoint_interval = Duration::from_millis(10);
    config
}

/// Puts MESSAGES acknowledged messages to `abc`/0 as a master, waits (simulated time)
/// until a checkpoint covers them all, then crashes the process.
fn store_checkpoint_crash(sim: &SimDisk) -> Vec<Placement> {
    let placements = run_local(true, async {
        let store = Store::open(
            config(BrokerRole::AsyncMaster),
            as_disk(sim),
            Clock::starting_at(0),
        )
        .await
        .unwrap();
        let mut placements = Vec::new();
        for index in 0..MESSAGES {
            let put = store
                .put(message(
                    "abc",
                    0,
                    format!("m{index}").as_bytes(),
                    None,
                    None,
                ))
                .await
                .unwrap();
            placements.push(put.placement.unwrap());
        }
        let end = store.log_positions().written;
        for _ in 0..1000 {
            if store.checkpointed_safe_offset() >= end {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            store.checkpointed_safe_offset(),
            end,
            "no checkpoint covered the puts"
        );
        placements
    });
    sim.crash_now();
    sim.restart();
    placements
}

fn segment_path(phys: u64) -> (PathBuf, u64) {
    let config = config(BrokerRole::Slave);
    let (base, size) = (config.offset_base(), config.commit_log_segment_size);
    let start = base + (phys - base) / size * size;
    let path = PathBuf::from("/store")
        .join(COMMIT_LOG_DIR)
        .join(segment_name(start));
    (path, start)
}

/// Writes `bytes` at `phys`, durably, as a disk's fault or an operator's hand would.
fn damage(sim: &SimDisk, phys: u64, bytes: Vec<u8>) {
    let (path, start) = segment_path(phys);
    run_local(true, async {
        let disk = as_disk(sim);
        let file = disk.open(&path, false).unwrap();
        disk.write_at(file, phys - start, Bytes::from(bytes))
            .await
            .unwrap();
        disk.sync_data(file).await.unwrap();
        disk.close(file);
    });
}

/// A bit flipped in the middle of `victim`'s body.
fn flip_a_bit(sim: &SimDisk, victim: Placement) {
    let (path, start) = segment_path(victim.phys_offset);
    let image = sim.durable_image(&path).expect("the segment exists");
    let at = victim.phys_offset + u64::from(victim.size) - 3;
    let byte = image[(at - start) as usize] ^ 0x10;
    damage(sim, at, vec![byte]);
}

/// Opens in `role`: the open's kind, where the log ends, and the queue's max offset.
fn open(sim: &SimDisk, role: BrokerRole) -> Result<(OpenKind, u64, u64), StoreError> {
    run_local(true, async {
        let store = Store::open(config(role), as_disk(sim), Clock::starting_at(0)).await?;
        let opened = (
            store.opened(),
            store.log_positions().written,
            store.max_offset("abc", 0),
        );
        store.shutdown().await?;
        Ok(opened)
    })
}

#[test]
fn a_replica_with_a_bit_flipped_below_the_safe_offset_recovers_from_the_damaged_record() {
    let sim = sim_disk(7);
    let placements = store_checkpoint_crash(&sim);
    let victim = placements[VICTIM];
    flip_a_bit(&sim, victim);
    let (opened, end, max) = open(&sim, BrokerRole::Slave).expect("the replica opens");
    let at = victim.phys_offset;
    assert_eq!(opened, OpenKind::Recovered { from: at, to: at });
    assert_eq!(end, at, "the log ends at the damaged record");
    assert_eq!(
        max, VICTIM as u64,
        "the queue ends before the damaged record"
    );
    // The cut is durable: a clean open later finds the same log.
    let (opened, end, max) = open(&sim, BrokerRole::Slave).expect("opens again");
    assert_eq!((opened, end, max), (OpenKind::Clean, at, VICTIM as u64));
}

#[test]
fn a_replica_with_zeros_below_the_safe_offset_recovers_from_where_they_begin() {
    let sim = sim_disk(8);
    let placements = store_checkpoint_crash(&sim);
    let victim = placements[VICTIM];
    let last = placements[MESSAGES - 1];
    let end = last.phys_offset + u64::from(last.size);
    damage(
        &sim,
        victim.phys_offset,
        vec![0; (end - victim.phys_offset) as usize],
    );
    let (opened, end, max) = open(&sim, BrokerRole::Slave).expect("the replica opens");
    let at = victim.phys_offset;
    assert_eq!(opened, OpenKind::Recovered { from: at, to: at });
    assert_eq!((end, max), (at, VICTIM as u64));
}

#[test]
fn a_master_with_a_bit_flipped_below_the_safe_offset_refuses_to_open_and_deletes_nothing() {
    let sim = sim_disk(9);
    let placements = store_checkpoint_crash(&sim);
    let victim = placements[VICTIM];
    flip_a_bit(&sim, victim);
    let (path, _) = segment_path(victim.phys_offset);
    let before = sim.durable_image(&path).expect("the segment exists");
    for role in [BrokerRole::SyncMaster, BrokerRole::AsyncMaster] {
        match open(&sim, role) {
            Err(StoreError::Corrupt(text)) => assert!(
                text.contains(&format!("damaged at {}", victim.phys_offset)),
                "{role:?}: the error names the offset: {text}"
            ),
            other => panic!("{role:?}: expected a corruption error, got {other:?}"),
        }
        assert_eq!(
            sim.durable_image(&path).expect("the segment still exists"),
            before,
            "{role:?}: the CommitLog changed"
        );
    }
}

#[test]
fn an_undamaged_log_recovers_whole_after_the_check() {
    let sim = sim_disk(10);
    let placements = store_checkpoint_crash(&sim);
    let last = placements[MESSAGES - 1];
    let end = last.phys_offset + u64::from(last.size);
    for role in [BrokerRole::Slave, BrokerRole::AsyncMaster] {
        let (opened, at, max) = open(&sim, role).expect("opens");
        assert!(matches!(
            opened,
            OpenKind::Recovered { .. } | OpenKind::Clean
        ));
        assert_eq!((at, max), (end, MESSAGES as u64), "{role:?}");
    }
}
