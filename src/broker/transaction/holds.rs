//! The half queue's retention hold: a shard's half queue is kept from the check cursor
//! (`CID_RMQ_SYS_TRANS`'s committed offset on it), the lowest half that may still be
//! undecided, while the disk is below `diskSpaceCleanForciblyRatio` (the rule of
//! `store/retention_holds.rs`), like the delay and timer holds. The committed cursor
//! trails the master's window by at most one check round, and on a slave it is the copy
//! of its master's; both only hold more, never less. The op queue needs no hold: a restart
//! reads op records only from the CommitLog offset of the half at the cursor on, which the
//! hold keeps.

use std::rc::Rc;
use std::sync::Arc;

use crate::broker::tables::consumer_offsets::ConsumerOffsets;
use crate::store::retention_holds::{Hold, RetentionHolds};
use crate::store::Store;

use super::halves::{CHECK_GROUP, HALF_TOPIC};

struct HalfHold {
    offsets: Arc<ConsumerOffsets>,
    half_queue: i32,
}

impl RetentionHolds for HalfHold {
    fn kind(&self) -> &'static str {
        "undecided half messages"
    }

    fn holds(&self) -> Vec<Hold> {
        vec![Hold {
            holder: CHECK_GROUP.to_string(),
            topic: HALF_TOPIC.to_string(),
            queue_id: self.half_queue,
            queue_offset: self
                .offsets
                .query(CHECK_GROUP, HALF_TOPIC, self.half_queue)
                .map_or(0, |offset| offset.max(0) as u64),
        }]
    }

    fn lost(&self, _hold: &Hold, _messages: u64) {
        // Logged by the store; the check service resolves halves retention took.
    }
}

/// Registers the hold of the half queue `half_queue` on `store`.
pub fn hold(store: &Store, offsets: Arc<ConsumerOffsets>, half_queue: i32) {
    store.add_retention_holds(Rc::new(HalfHold {
        offsets,
        half_queue,
    }));
}
