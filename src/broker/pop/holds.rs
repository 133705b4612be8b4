//! The POP revive log's retention hold: the shard's queue of
//! [`crate::broker::pop::log::POP_LOG_TOPIC`] is kept from the lowest checkpoint of any delivery
//! still in flight, as the written replay mark says ([`crate::broker::pop::Pops::replay_from`]), while the disk is below
//! `diskSpaceCleanForciblyRatio` (the rule of `store/retention_holds.rs`). The popped
//! messages themselves are not held: a delivery whose record retention took is consumed
//! as gone when it falls due (logged).

use std::rc::Rc;

use crate::broker::pop::log::POP_LOG_TOPIC;
use crate::broker::pop::Pops;
use crate::store::retention_holds::{Hold, RetentionHolds};
use crate::store::Store;

/// The hold of one shard's POP log.
pub struct PopHolds {
    pops: Rc<Pops>,
}

impl RetentionHolds for PopHolds {
    fn kind(&self) -> &'static str {
        "POP revive log"
    }

    fn holds(&self) -> Vec<Hold> {
        vec![Hold {
            holder: "POP in-flight table".to_string(),
            topic: POP_LOG_TOPIC.to_string(),
            queue_id: self.pops.log_queue,
            queue_offset: self.pops.replay_from(),
        }]
    }

    fn lost(&self, _hold: &Hold, _messages: u64) {
        // The store has logged it; a replay after a restart starts at the log's minimum.
    }
}

/// Registers the POP log's hold on `store`.
pub fn hold(store: &Store, pops: &Rc<Pops>) {
    store.add_retention_holds(Rc::new(PopHolds { pops: pops.clone() }));
}
