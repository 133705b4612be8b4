//! A replica's truncation runs to its end even when its caller is dropped part way (a
//! clean stop aborts the HA stream that awaits it): the clean checkpoint that follows never
//! claims bytes the cut zeroed. Found by the replication fault campaign (seed 43 under
//! load: a slave stopped while truncating came back as master serving zeros at the cut,
//! and its slave refused them forever). Two faults made it: the stop aborted the stream
//! and with it the cut, and the stop's wait for the replica slot (`drop_incomplete`) did
//! not wait, since a failed `BusyGuard::take` freed the slot it found held. Each case drops the caller after a different
//! number of polls, then stops the replica cleanly and opens it again: its log ends at
//! the cut, or (dropped before the cut began) where it ended, and holds the master's bytes
//! either way. On the portable disk in a temporary directory: its writes and syncs are
//! blocking-pool jobs, so the steps' awaits really wait and a drop lands between them.

use crate::common;

use std::rc::Rc;

use common::{run_local, Rng};
use ringmq::clock::Clock;
use ringmq::config::{BrokerRole, FlushMode, StoreConfig};
use ringmq::io::portable::PortableDisk;
use ringmq::io::Disk;
use ringmq::store::Store;

use crate::replica_stream::{config, put_some, stream};

/// Polls of the truncation before its caller is dropped: past most awaits of its steps
/// (each blocking-pool job takes several).
const MOST_POLLS: usize = 20;
/// As many polls as the truncation takes.
const FOREVER: usize = usize::MAX;

async fn open(disk: &Rc<dyn Disk>, config: &StoreConfig) -> Store {
    Store::open(
        config.clone(),
        disk.clone(),
        Clock::starting_at(1_800_000_000_000),
    )
    .await
    .unwrap_or_else(|error| panic!("opening {}: {error}", config.dir.display()))
}

#[test]
fn a_truncation_whose_caller_is_dropped_still_ends_before_the_clean_stop() {
    // The last: a caller that sees the truncation end.
    for polls in (1..=MOST_POLLS).chain([FOREVER]) {
        run_local(false, dropped_after(polls));
    }
}

async fn dropped_after(polls: usize) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let disk: Rc<dyn Disk> = Rc::new(PortableDisk::new());
    let master_config = config(&path("master"), BrokerRole::SyncMaster, FlushMode::Sync);
    let replica_config = config(&path("replica"), BrokerRole::Slave, FlushMode::Async);
    let master = open(&disk, &master_config).await;
    let replica = open(&disk, &replica_config).await;
    let mut rng = Rng::new(polls as u64);
    put_some(&master, &mut rng, 20, "old").await;
    stream(&master, &replica, &mut rng).await;
    let cut_at = replica.log_positions().written;
    put_some(&master, &mut rng, 20, "cut").await;
    stream(&master, &replica, &mut rng).await;
    let from = replica.log_positions().written;
    assert!(
        from > cut_at,
        "{polls} polls: the replica grew past the cut point"
    );

    let mut truncation = Box::pin(replica.truncate_replica(cut_at));
    for _ in 0..polls {
        tokio::select! {
            biased;
            done = &mut truncation => {
                done.unwrap_or_else(|error| panic!("{polls} polls: truncation: {error}"));
                break;
            }
            () = tokio::task::yield_now() => {}
        }
    }
    drop(truncation);
    replica
        .shutdown()
        .await
        .unwrap_or_else(|error| panic!("{polls} polls: clean stop: {error}"));

    let replica = open(&disk, &replica_config).await;
    let end = replica.log_positions().written;
    assert!(
        end == cut_at || end == from,
        "{polls} polls: the reopened replica ends at {end}, neither the cut {cut_at} nor \
         its end before {from}"
    );
    assert_same_bytes(&master, &replica, end, polls);
    replica.shutdown().await.unwrap();
    master.shutdown().await.unwrap();
}

/// The replica's log below `end` is the master's, byte for byte.
fn assert_same_bytes(master: &Store, replica: &Store, end: u64, polls: usize) {
    let mut at = 0;
    while at < end {
        let want = master
            .replica_range(at, (end - at) as usize)
            .unwrap()
            .unwrap();
        let have = replica
            .replica_range(at, (end - at) as usize)
            .unwrap()
            .unwrap();
        let len = want.bytes.len().min(have.bytes.len());
        assert!(len > 0, "{polls} polls: nothing to read at {at}");
        let differ = want.bytes[..len]
            .iter()
            .zip(&have.bytes[..len])
            .position(|(a, b)| a != b);
        assert!(
            differ.is_none(),
            "{polls} polls: the reopened replica's bytes at {at}..{} are not the master's \
             from {:?} on, the log ending at {end} (a clean checkpoint claimed what the cut \
             zeroed)",
            at + len as u64,
            differ.map(|d| at + d as u64)
        );
        at += len as u64;
    }
}
