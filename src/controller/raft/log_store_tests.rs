//! The log store, slot pairs and snapshot files on the simulated disk: what survives a
//! crash, a torn tail cut, a corrupt middle refused, truncation and purge across restarts.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogReader, RaftLogStorage};

use super::log_files;
use super::log_store::LogStore;
use super::slots::SlotPair;
use super::snapshot_files::SnapshotFiles;
use super::types::{Entry, LogId, Payload, RaftTypes, Snapshot, SnapshotMeta, Vote};
use crate::io::sim::{SimConfig, SimDisk};
use crate::io::Disk;

fn dir() -> PathBuf {
    PathBuf::from("/raft/log")
}

fn id(term: u64, index: u64) -> LogId {
    openraft::testing::log_id::<RaftTypes>(term, 1, index)
}

fn entry(term: u64, index: u64) -> Entry {
    Entry::new_normal(
        id(term, index),
        Payload(format!("command {index}").into_bytes()),
    )
}

async fn append(store: &mut LogStore, term: u64, indexes: std::ops::RangeInclusive<u64>) {
    let entries: Vec<Entry> = indexes.map(|index| entry(term, index)).collect();
    store
        .append(entries, IOFlushed::noop())
        .await
        .expect("append");
}

async fn indexes(store: &mut LogStore) -> Vec<(u64, u64)> {
    let entries = store.try_get_log_entries(0..).await.expect("read");
    entries
        .iter()
        .map(|entry| (entry.log_id().leader_id.term, entry.index()))
        .collect()
}

fn disk(seed: u64) -> Rc<SimDisk> {
    Rc::new(SimDisk::new(SimConfig::with_seed(seed)))
}

fn open(disk: &Rc<SimDisk>) -> std::io::Result<LogStore> {
    LogStore::open(disk.clone() as Rc<dyn Disk>, &dir())
}

fn log_path(first: u64) -> PathBuf {
    dir().join(log_files::file_name(first))
}

#[tokio::test]
async fn synced_entries_and_the_vote_survive_a_crash() {
    for seed in 0..8 {
        let disk = disk(seed);
        let mut store = open(&disk).unwrap();
        assert!(store.is_fresh());
        store.save_vote(&Vote::new(3, 2)).await.unwrap();
        append(&mut store, 3, 0..=4).await;
        store.save_committed(Some(id(3, 2))).await.unwrap();
        drop(store);
        disk.restart();
        let mut store = open(&disk).unwrap();
        assert!(!store.is_fresh());
        assert_eq!(
            store.read_vote().await.unwrap(),
            Some(Vote::new(3, 2)),
            "seed {seed}"
        );
        assert_eq!(
            store.read_committed().await.unwrap(),
            Some(id(3, 2)),
            "seed {seed}"
        );
        assert_eq!(
            indexes(&mut store).await,
            (0..=4).map(|i| (3, i)).collect::<Vec<_>>(),
            "seed {seed}"
        );
    }
}

/// Unsynced bytes after the last record (a write the crash interrupted) are cut at
/// whatever the crash left of them, and appends go on after the cut.
#[tokio::test]
async fn a_torn_tail_is_cut() {
    for seed in 0..16 {
        let disk = disk(seed);
        let mut store = open(&disk).unwrap();
        append(&mut store, 1, 0..=3).await;
        drop(store);
        let mut tail = Vec::new();
        log_files::encode(&entry(1, 4), 4, &mut tail);
        log_files::encode(&entry(1, 5), 4, &mut tail);
        let path = log_path(0);
        let file = disk.open(&path, false).unwrap();
        let end = disk.file_len(file).unwrap();
        // Half the tail, unsynced: the crash keeps, drops or tears it.
        disk.write_at(file, end, Bytes::from(tail[..tail.len() - 7].to_vec()))
            .await
            .unwrap();
        disk.restart();
        let mut store = open(&disk).unwrap();
        let held = indexes(&mut store).await;
        // Entry 4's record may have reached the disk whole; entry 5's is never whole.
        assert!(
            held == (0..=3).map(|i| (1, i)).collect::<Vec<_>>()
                || held == (0..=4).map(|i| (1, i)).collect::<Vec<_>>(),
            "seed {seed}: {held:?}"
        );
        store.truncate_after(Some(id(1, 3))).await.unwrap();
        append(&mut store, 2, 4..=4).await;
        drop(store);
        disk.restart();
        let mut store = open(&disk).unwrap();
        let mut expected: Vec<_> = (0..=3).map(|i| (1, i)).collect();
        expected.push((2, 4));
        assert_eq!(indexes(&mut store).await, expected, "seed {seed}");
    }
}

#[tokio::test]
async fn a_corrupt_entry_followed_by_a_later_batch_is_refused() {
    let disk = disk(1);
    let mut store = open(&disk).unwrap();
    append(&mut store, 1, 0..=2).await;
    append(&mut store, 1, 3..=4).await;
    drop(store);
    let file = disk.open(&log_path(0), false).unwrap();
    // The second record's first payload byte (header 8, batch field 8).
    let mut first = Vec::new();
    log_files::encode(&entry(1, 0), 0, &mut first);
    let offset = first.len() as u64 + 16;
    disk.write_at(file, offset, Bytes::from_static(b"#"))
        .await
        .unwrap();
    disk.sync_data(file).await.unwrap();
    disk.close(file);
    let error = open(&disk).err().expect("a corrupt middle is refused");
    let message = error.to_string();
    assert!(
        message.contains(&log_path(0).display().to_string()),
        "{message}"
    );
    assert!(
        message.contains(&format!("offset {}", first.len())),
        "{message}"
    );
}

/// A crash after an append's write but before its sync: the batch is there whole, in
/// part, or not at all, and the log opens.
#[tokio::test]
async fn a_crash_inside_an_append_leaves_a_prefix() {
    for seed in 0..16 {
        let disk = disk(seed);
        let mut store = open(&disk).unwrap();
        append(&mut store, 1, 0..=2).await;
        disk.crash_after_ops(1);
        let batch: Vec<Entry> = (3..=9).map(|index| entry(1, index)).collect();
        assert!(
            store.append(batch, IOFlushed::noop()).await.is_err(),
            "the sync fails"
        );
        drop(store);
        disk.restart();
        let mut store = open(&disk).unwrap();
        let held = indexes(&mut store).await;
        assert!(held.len() >= 3 && held.len() <= 10, "seed {seed}: {held:?}");
        assert!(
            held.iter()
                .enumerate()
                .all(|(n, (_, index))| n as u64 == *index),
            "seed {seed}: {held:?}"
        );
    }
}

#[tokio::test]
async fn truncation_and_purge_survive_restarts() {
    let disk = disk(7);
    let mut store = open(&disk).unwrap();
    append(&mut store, 1, 0..=9).await;
    store.truncate_after(Some(id(1, 6))).await.unwrap();
    append(&mut store, 2, 7..=8).await;
    store.purge(id(1, 5)).await.unwrap();
    append(&mut store, 2, 9..=12).await;
    assert!(disk.exists(&log_path(9)), "a purge starts a new file");
    store.purge(id(2, 10)).await.unwrap();
    assert!(
        !disk.exists(&log_path(0)),
        "a file wholly purged is removed"
    );
    drop(store);
    disk.restart();
    let mut store = open(&disk).unwrap();
    assert_eq!(indexes(&mut store).await, vec![(2, 11), (2, 12)]);
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(id(2, 10)));
    assert_eq!(state.last_log_id, Some(id(2, 12)));
    // Truncating back to a file's first entry and appending again reuses that file.
    store.truncate_after(Some(id(2, 10))).await.unwrap();
    append(&mut store, 3, 11..=11).await;
    drop(store);
    disk.restart();
    let mut store = open(&disk).unwrap();
    assert_eq!(indexes(&mut store).await, vec![(3, 11)]);
}

#[tokio::test]
async fn a_slot_pair_keeps_the_last_completed_value_across_a_torn_write() {
    for seed in 0..16 {
        let disk = disk(seed);
        let dir = Path::new("/raft/slots");
        disk.create_dir_all(dir).unwrap();
        let (mut slots, value) = SlotPair::open(disk.clone() as Rc<dyn Disk>, dir, "meta").unwrap();
        assert_eq!(value, None);
        slots.write(b"one").await.unwrap();
        slots.write(b"two").await.unwrap();
        disk.crash_after_ops(1);
        assert!(slots.write(&[7u8; 3000]).await.is_err());
        drop(slots);
        disk.restart();
        let (_, value) = SlotPair::open(disk.clone() as Rc<dyn Disk>, dir, "meta").unwrap();
        assert_eq!(value.as_deref(), Some(&b"two"[..]), "seed {seed}");
    }
}

#[tokio::test]
async fn a_saved_snapshot_is_read_back_after_a_crash() {
    let disk = disk(3);
    let dir = Path::new("/raft/snapshot");
    let mut files = SnapshotFiles::open(disk.clone() as Rc<dyn Disk>, dir).unwrap();
    assert!(files.current().is_none());
    let snapshot = Snapshot {
        meta: SnapshotMeta {
            last_log_id: Some(id(2, 40)),
            last_membership: Default::default(),
        },
        snapshot: b"the state".to_vec(),
    };
    files.save(snapshot.clone()).await.unwrap();
    drop(files);
    disk.restart();
    let files = SnapshotFiles::open(disk.clone() as Rc<dyn Disk>, dir).unwrap();
    let read = files.current().expect("the snapshot survives");
    assert_eq!(read.meta, snapshot.meta);
    assert_eq!(read.snapshot, snapshot.snapshot);
}
