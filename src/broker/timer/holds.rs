//! The timer store's retention hold: a pending timer message is kept past
//! `fileReservedTime` until it is delivered, while the disk is below
//! `diskSpaceCleanForciblyRatio` (the rule of `store/retention_holds.rs`).
//!
//! The hold is on the shard's `rmq_sys_wheel_timer` queue from the lowest queue offset the
//! timer store still needs ([`crate::broker::timer::scheduler::Timers::lowest_needed`]): the lowest
//! offset of any timer not yet delivered, where a run counts from its lowest offset until
//! all of it is delivered (cheap to answer, and it never holds too little). At or above
//! the forced ratio the records go; the scheduler then finds no record for their keys,
//! skips them and counts them in `ringmq_timer_skipped_total`.

use std::rc::Rc;

use crate::broker::timer::scheduler::Timers;
use crate::broker::timer::TIMER_TOPIC;
use crate::store::retention_holds::{Hold, RetentionHolds};
use crate::store::Store;

/// The hold of one shard's timers.
pub struct TimerHolds {
    timers: Rc<Timers>,
}

impl RetentionHolds for TimerHolds {
    fn kind(&self) -> &'static str {
        "timer"
    }

    fn holds(&self) -> Vec<Hold> {
        vec![Hold {
            holder: "timer store".to_string(),
            topic: TIMER_TOPIC.to_string(),
            queue_id: self.timers.queue,
            queue_offset: self.timers.lowest_needed(),
        }]
    }

    fn lost(&self, _hold: &Hold, _messages: u64) {
        // The store has logged it; the scheduler counts the records it then skips.
    }
}

/// Registers the timers' hold on `store`. Call it before the first await after the store
/// opened.
pub fn hold(store: &Store, timers: &Rc<Timers>) {
    store.add_retention_holds(Rc::new(TimerHolds {
        timers: timers.clone(),
    }));
}
