//! A store on a real disk makes its data writes as its flush mode suits: copied into the
//! files' mappings under ASYNC_FLUSH, `pwrite` under SYNC_FLUSH (where a mapped tail page
//! would fault after every sync). Either way every message reads back, also after a
//! reopen.

use crate::common;

use common::{message, run_local};
use ringmq::clock::Clock;
use ringmq::config::{FlushMode, StoreConfig};
use ringmq::io::{open_backend, DataWrites, IoChoice};
use ringmq::store::{GetStatus, PutStatus, Store};

/// Fewer than one pull returns at most (32).
const MESSAGES: u64 = 30;

fn put_and_read_back(flush: FlushMode) -> ringmq::io::IoStats {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = StoreConfig::new(tmp.path());
    config.flush_mode = flush;
    config.commit_log_segment_size = 8 << 20;
    let read_all = |store: &Store| {
        let got = store
            .get_messages("TopicA", 1, 0, MESSAGES as u32, None)
            .unwrap();
        assert_eq!(got.status, GetStatus::Found);
        assert_eq!(got.messages.len() as u64, MESSAGES, "{flush:?}");
    };
    let stats = run_local(false, async {
        let disk = open_backend(IoChoice::Auto, flush.data_writes()).unwrap();
        let store = Store::open(config.clone(), disk, Clock::system())
            .await
            .unwrap();
        for index in 0..MESSAGES {
            let body = format!("body-{index}");
            let put = store
                .put(message("TopicA", 1, body.as_bytes(), Some("TagA"), None))
                .await
                .unwrap();
            assert_eq!(put.status, PutStatus::Ok);
        }
        read_all(&store);
        let stats = store.io_stats();
        store.shutdown().await.unwrap();
        stats
    });
    run_local(false, async {
        let disk = open_backend(IoChoice::Auto, flush.data_writes()).unwrap();
        let store = Store::open(config, disk, Clock::system()).await.unwrap();
        read_all(&store);
        store.shutdown().await.unwrap();
    });
    stats
}

#[test]
fn async_flush_writes_through_the_mapping() {
    assert_eq!(FlushMode::Async.data_writes(), DataWrites::Mapped);
    let stats = put_and_read_back(FlushMode::Async);
    assert!(
        stats.mapped_writes >= MESSAGES,
        "every CommitLog write lands in the preallocated segment: {stats:?}"
    );
}

#[test]
fn sync_flush_writes_with_pwrite() {
    assert_eq!(FlushMode::Sync.data_writes(), DataWrites::Pwrite);
    let stats = put_and_read_back(FlushMode::Sync);
    assert_eq!(stats.mapped_writes, 0, "{stats:?}");
    assert!(stats.writes >= MESSAGES, "{stats:?}");
}

#[test]
fn a_full_commit_log_segment_is_no_longer_mapped() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = StoreConfig::new(tmp.path());
    config.flush_mode = FlushMode::Async;
    config.commit_log_segment_size = 1 << 20;
    config.max_message_size = 64 * 1024;
    let commit_log = tmp.path().join("commitlog");
    let mapped_segments = || {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let dir = commit_log.to_str().unwrap().to_owned();
        maps.lines().filter(|line| line.contains(&dir)).count()
    };
    run_local(false, async {
        let disk = open_backend(IoChoice::Auto, DataWrites::Mapped).unwrap();
        let store = Store::open(config, disk, Clock::system()).await.unwrap();
        let body = vec![b'x'; 2000];
        // About 2.3 MiB of records: two full segments and part of a third.
        for _ in 0..1200 {
            let put = store
                .put(message("TopicA", 1, &body, None, None))
                .await
                .unwrap();
            assert_eq!(put.status, PutStatus::Ok);
        }
        assert_eq!(store.max_offset("TopicA", 1), 1200);
        let segments = std::fs::read_dir(&commit_log).unwrap().count();
        assert!(segments >= 3, "the log rolled: {segments} segments");
        assert!(store.io_stats().mapped_writes > 0);
        assert_eq!(
            mapped_segments(),
            1,
            "only the segment being appended to stays mapped"
        );
        store.shutdown().await.unwrap();
    });
}
