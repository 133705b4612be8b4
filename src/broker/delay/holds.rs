//! The delay levels' retention holds: a delayed message waiting in `SCHEDULE_TOPIC_XXXX`
//! is kept past `fileReservedTime` until its scheduler has delivered it, while the disk
//! is below `diskSpaceCleanForciblyRatio` (the rule of `store/retention_holds.rs`).
//!
//! What this module owns: [`DelayHolds`], registered on every shard's store ([`hold`]).
//! Each level's cursor in the node-wide [`DelayOffsets`] (the next schedule-queue offset
//! its scheduler will deliver) is a hold on that level's queue from the cursor on; the
//! store ignores the levels whose queue is on another shard, and a level with nothing
//! waiting (cursor at the queue's end) holds nothing. So RocketMQ's blind expiry, which
//! can delete a 2-hour-delayed message's segment before it is due, does not happen here
//! below the forced ratio. At or above it the waiting messages go with their segments;
//! the store logs each level's loss ("delay level N lost ..."), and their scheduler skips
//! the missing records (counted in `ringmq_delay_skipped_total`).

use std::rc::Rc;
use std::sync::Arc;

use crate::broker::delay::offsets::DelayOffsets;
use crate::broker::Broker;
use crate::store::retention_holds::{Hold, RetentionHolds};
use crate::store::topic::SCHEDULE_TOPIC;

/// The holds of the delay levels `1..=levels`.
pub struct DelayHolds {
    levels: u32,
    cursors: Arc<DelayOffsets>,
}

impl RetentionHolds for DelayHolds {
    fn kind(&self) -> &'static str {
        "delay"
    }

    fn holds(&self) -> Vec<Hold> {
        (1..=self.levels)
            .map(|level| Hold {
                holder: format!("level {level}"),
                topic: SCHEDULE_TOPIC.to_string(),
                queue_id: level as i32 - 1,
                queue_offset: self.cursors.get(level).unwrap_or(0),
            })
            .collect()
    }

    fn lost(&self, _hold: &Hold, _messages: u64) {
        // The store has logged it; the scheduler counts the records it then skips.
    }
}

/// Registers the delay levels' holds on the broker's store. Call it before the first
/// await after the store opened.
pub fn hold(broker: &Broker) {
    broker.store.add_retention_holds(Rc::new(DelayHolds {
        levels: broker.config.delay_levels.max_level(),
        cursors: broker.delay_offsets.clone(),
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_level_holds_its_queue_from_its_cursor() {
        let cursors = Arc::new(DelayOffsets::in_memory("/nowhere/delayOffset.json".into()));
        cursors.set(2, 7, 0);
        let holds = DelayHolds { levels: 3, cursors }.holds();
        let at: Vec<(i32, u64)> = holds.iter().map(|h| (h.queue_id, h.queue_offset)).collect();
        assert_eq!(at, [(0, 0), (1, 7), (2, 0)]);
        assert!(holds.iter().all(|h| h.topic == SCHEDULE_TOPIC));
        assert_eq!(holds[1].holder, "level 2");
    }
}
