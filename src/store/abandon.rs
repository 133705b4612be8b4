//! Abandoning a store as a `kill -9` would leave it: the sim's crash of a node that runs
//! on the caller's thread ([`crate::node::local`]), where no process dies to end the
//! store's tasks and release its directory lock.
//!
//! What an abandoned store leaves on disk is exactly what its writes put there (the page
//! cache of a killed process survives it): no flush, no checkpoint, no clean mark, and the
//! abort marker stays, so the next open of the directory runs crash recovery. What it ends:
//! every task of the store (appender, flusher, checkpointer, watchdog, cleaner, the
//! segment preallocator), its open files, and the directory lock, at once and without an
//! await, so a drop can abandon it.
//!
//! Invariant: after [`abandon`] no task of the store is polled again (tokio drops an
//! aborted task without polling it), puts are refused ([`super::StoreError::ShuttingDown`]),
//! and the directory can be locked again by the next open. Writes already issued finish or
//! not, as a process's do when it is killed.

use super::Shared;

/// Ends everything of the store without writing (see the module docs). Idempotent, and a
/// no-op after a clean shutdown (which already drained the tasks and released the lock).
pub(crate) fn abandon(shared: &Shared) {
    if shared.lock_file.borrow().is_none() {
        // Shut down cleanly, or abandoned already: nothing runs, nothing is held.
        return;
    }
    // Puts from tasks outside the store (a request still running) are refused from here.
    shared.closing.set(true);
    for task in shared.tasks.borrow_mut().drain(..) {
        task.abort();
    }
    // Aborts the preallocator, then closes the segments: no sync, no write.
    shared.log.close();
    for queue in shared.all_queues() {
        queue.close();
    }
    if let Some(index) = &shared.index {
        index.close();
    }
    // A checkpoint write in flight holds the file; aborted with its task, it is dropped.
    if let Some(file) = shared.checkpoint.borrow_mut().take() {
        file.close();
    }
    shared.lock_file.borrow_mut().take();
    tracing::warn!(
        "store {} abandoned (killed): the next open recovers it",
        shared.config.dir.display()
    );
}

/// Abandons its store when dropped, unless the store was shut down cleanly by then: held
/// by whoever runs a store (a shard), so that aborting it, or returning early with an
/// error, ends the store's tasks and releases its directory as a killed process would.
pub struct AbandonOnDrop {
    pub(super) store: super::Store,
}

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        abandon(&self.store.shared);
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::net::SocketAddr;
    use std::rc::Rc;

    use bytes::Bytes;

    use crate::clock::Clock;
    use crate::config::StoreConfig;
    use crate::io::sim::{SimConfig, SimDisk};
    use crate::store::record::{self, RecordInput};
    use crate::store::{OpenKind, Store, StoreError};

    fn run<F: Future>(future: F) -> F::Output {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("runtime");
        tokio::task::LocalSet::new().block_on(&runtime, future)
    }

    fn input(body: &[u8]) -> RecordInput {
        RecordInput {
            topic: "Abandoned".to_string(),
            queue_id: 0,
            flag: 0,
            sys_flag: 0,
            born_timestamp: 1_700_000_000_000,
            born_host: SocketAddr::from(([10, 0, 0, 7], 50000)),
            store_host: SocketAddr::from(([127, 0, 0, 1], 10911)),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body_crc: record::body_crc(body),
            body: Bytes::copy_from_slice(body),
            properties: String::new(),
        }
    }

    async fn open(sim: &SimDisk) -> Result<Store, StoreError> {
        let config = StoreConfig::test_min("/store");
        Store::open(config, Rc::new(sim.clone()), Clock::starting_at(0)).await
    }

    #[test]
    fn an_abandoned_store_is_unlocked_refuses_puts_and_reopens_by_recovery() {
        run(async {
            let sim = SimDisk::new(SimConfig::with_seed(25));
            let store = open(&sim).await.unwrap();
            for n in 0..10 {
                store.put(input(format!("m{n}").as_bytes())).await.unwrap();
            }
            assert!(
                matches!(open(&sim).await, Err(StoreError::Locked(_))),
                "a running store holds its directory"
            );
            store.abandon();
            assert_eq!(
                store.put(input(b"late")).await.err(),
                Some(StoreError::ShuttingDown)
            );
            let again = open(&sim)
                .await
                .expect("an abandoned store's directory reopens");
            assert!(
                matches!(again.opened(), OpenKind::Recovered { .. }),
                "no clean mark was written: {:?}",
                again.opened()
            );
            assert_eq!(again.max_offset("Abandoned", 0), 10);
            again.shutdown().await.unwrap();
            // Abandoning after a clean shutdown changes nothing: the next open is clean.
            again.abandon();
            assert_eq!(open(&sim).await.unwrap().opened(), OpenKind::Clean);
        });
    }
}
