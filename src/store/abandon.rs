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
