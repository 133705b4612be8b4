//! Whether a master's batches need a replica's confirmation, decided outside the store
//! (controller mode, D18: by the SyncStateSet, which the controllers hold) and read by
//! each shard's appender at every batch. Shared across threads: the broker's supervisor
//! sets it, every shard's store reads it.
//!
//! Not needed (the set holds only the master): a batch is released on the flush mode's
//! condition and answered SEND_OK, as an ASYNC_MASTER's. Needed: on the replica's
//! confirmation too (D7), or SLAVE_NOT_AVAILABLE when none is attached.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One node's switch, cloned into every shard's store.
#[derive(Clone, Debug, Default)]
pub struct ReplicaGate(Arc<AtomicBool>);

impl ReplicaGate {
    /// A gate that starts at `needed`.
    pub fn new(needed: bool) -> ReplicaGate {
        ReplicaGate(Arc::new(AtomicBool::new(needed)))
    }

    pub fn needed(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Sets whether batches written from now on need a replica. Batches written before
    /// keep what they were written with.
    pub fn set_needed(&self, needed: bool) {
        self.0.store(needed, Ordering::Release);
    }
}

impl PartialEq for ReplicaGate {
    fn eq(&self, other: &ReplicaGate) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ReplicaGate {}
