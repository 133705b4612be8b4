//! Whether a master's batches need a replica's confirmation, decided outside the store
//! (controller mode, D18: by the SyncStateSet, which the controllers hold) and read by
//! each shard's appender at every batch. Shared across threads: the broker's supervisor
//! sets it, every shard's store reads it.
//!
//! Not needed (the set holds only the master): a batch is released on the flush mode's
//! condition and answered SEND_OK, as an ASYNC_MASTER's. Needed: on the replicas'
//! confirmation too (D7), or SLAVE_NOT_AVAILABLE when none is attached.
//!
//! Which replicas confirm: with `members` set (controller mode), every slave it names
//! must hold a batch (`allAckInSyncStateSet`: the set is the durability boundary, so any
//! member the controllers may elect holds everything acknowledged); without, the best
//! streaming slave (classic SYNC_MASTER). The supervisor sets the members to the
//! SyncStateSet's slaves together with any that are joining it or may have joined it.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// One node's switch, cloned into every shard's store.
#[derive(Clone, Debug, Default)]
pub struct ReplicaGate {
    needed: Arc<AtomicBool>,
    members: Arc<Mutex<Option<Arc<BTreeSet<u64>>>>>,
}

impl ReplicaGate {
    /// A gate that starts at `needed`, confirmed by the best slave until
    /// [`ReplicaGate::set_members`].
    pub fn new(needed: bool) -> ReplicaGate {
        ReplicaGate {
            needed: Arc::new(AtomicBool::new(needed)),
            members: Arc::default(),
        }
    }

    pub fn needed(&self) -> bool {
        self.needed.load(Ordering::Acquire)
    }

    /// Sets whether batches written from now on need a replica. Batches written before
    /// keep what they were written with.
    pub fn set_needed(&self, needed: bool) {
        self.needed.store(needed, Ordering::Release);
    }

    /// The slaves (by broker id) every one of which must hold a batch before it is
    /// confirmed; `None`: the best streaming slave confirms.
    pub fn members(&self) -> Option<Arc<BTreeSet<u64>>> {
        self.members
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Sets [`ReplicaGate::members`]; it counts from the next confirmation on.
    pub fn set_members(&self, members: BTreeSet<u64>) {
        *self.members.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(members));
    }
}

impl PartialEq for ReplicaGate {
    fn eq(&self, other: &ReplicaGate) -> bool {
        Arc::ptr_eq(&self.needed, &other.needed)
    }
}

impl Eq for ReplicaGate {}
