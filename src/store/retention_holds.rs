//! Retention holds: the seam through which something outside the store (the broker's
//! protected consumer groups, `retentionProtectedGroups`) keeps the CommitLog records it
//! still needs from being deleted, and hears when a forced run deleted them anyway.
//!
//! What this module owns: the [`RetentionHolds`] trait a holder implements, the [`Hold`]
//! it answers with, and the translation of holds into the store's terms: for each hold on
//! a queue this store has, the physical offset of the first record the holder still
//! needs ([`resolve`]), and after a forced run, what each hold lost ([`lost_range`]).
//!
//! The store does not know who holds: a holder is registered on the store
//! ([`super::Store::add_retention_holds`], by the node, before the store's first await
//! after opening) and is asked at every retention run that may delete. The store depends
//! on nothing of the broker: a hold is a queue position, `(topic, queue id, queue offset)`,
//! and the records from that offset on are what is held.
//!
//! Rules:
//! - A hold on a queue the store has no ConsumeQueue for is ignored: it belongs to
//!   another shard's store (D3), or nothing was ever stored there.
//! - A hold at or past the queue's end holds nothing (everything was consumed).
//! - A hold below the queue's minimum holds from the minimum (what is below is gone).
//! - The floor of a run is the lowest physical offset any hold resolves to; a run that is
//!   not forced keeps every segment that ends after it (`retention.rs`), so a hold's
//!   records are never trimmed from its queue by such a run (asserted there).
//! - At `diskSpaceCleanForciblyRatio` or above holds are ignored; every hold whose queue
//!   minimum moved past where it held from is reported to its holder
//!   ([`RetentionHolds::lost`]) and logged, one line per hold.
//!
//! The delay levels register one too (`broker/delay_holds.rs`): each level holds its
//! `SCHEDULE_TOPIC_XXXX` queue from its scheduler's cursor. Future holders (timer
//! messages, POP revive state) register a [`RetentionHolds`] of their own the same way:
//! POP would hold the queues at its oldest unacknowledged offsets. A holder whose state points into the log directly (the
//! timer log) would add a `Hold` variant carrying a physical offset; the floor is the
//! minimum over every holder either way.

use std::rc::Rc;

use super::consume_queue::ConsumeQueue;

/// A queue position whose records, from `queue_offset` on, a holder still needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// Who holds, as logs and metrics name it (a consumer group's name).
    pub holder: String,
    pub topic: String,
    pub queue_id: i32,
    /// The first queue offset still needed (a consumer group's committed offset).
    pub queue_offset: u64,
}

/// Something that keeps records from retention. Asked on the store's thread, once per
/// retention run that may delete; answers must be cheap (a table lookup, no I/O).
pub trait RetentionHolds {
    /// What holds, for log lines: "protected consumer group".
    fn kind(&self) -> &'static str;

    /// Every position held now. Positions on queues this store does not have are fine:
    /// they are ignored.
    fn holds(&self) -> Vec<Hold>;

    /// A forced run deleted `messages` records of `hold`'s queue that it still needed
    /// (the store has logged it already); for the holder's own counters.
    fn lost(&self, hold: &Hold, messages: u64);
}

/// A hold resolved against this store's queue, at the start of a run.
pub(crate) struct Resolved {
    pub holds: Rc<dyn RetentionHolds>,
    pub hold: Hold,
    pub queue: Rc<ConsumeQueue>,
    /// The first queue offset still held and stored: the hold's offset, or the queue's
    /// minimum when the hold is below it.
    pub from: u64,
    /// The physical offset of the record at `from`.
    pub phys: u64,
}

/// Where a hold starts holding in a queue `[min, max)`: `None` when it holds nothing.
pub(crate) fn held_from(queue_offset: u64, min: u64, max: u64) -> Option<u64> {
    // Clamped first: a hold below a queue emptied by retention (min == max > 0) holds
    // nothing, not the entry at `min`, which is not there.
    let from = queue_offset.max(min);
    (from < max).then_some(from)
}

/// The queue offsets a hold lost when its queue's minimum moved to `new_min`: from where
/// it held to the new minimum, if that is past it.
pub(crate) fn lost_range(from: u64, new_min: u64) -> Option<std::ops::Range<u64>> {
    (new_min > from).then_some(from..new_min)
}

/// Every hold of every holder, resolved against the queues `queue` finds; holds that
/// hold nothing here are left out.
pub(crate) fn resolve(
    holders: &[Rc<dyn RetentionHolds>],
    queue: impl Fn(&str, i32) -> Option<Rc<ConsumeQueue>>,
) -> std::io::Result<Vec<Resolved>> {
    let mut resolved = Vec::new();
    for holds in holders {
        for hold in holds.holds() {
            let Some(found) = queue(&hold.topic, hold.queue_id) else {
                continue;
            };
            let (min, max) = (found.min_offset(), found.max_offset());
            let Some(from) = held_from(hold.queue_offset, min, max) else {
                continue;
            };
            let entry = found.read_entries(from, 1)?;
            let entry = entry.first().unwrap_or_else(|| {
                panic!(
                    "queue {}/{} has no entry at {from}, inside its range [{min}, {max})",
                    hold.topic, hold.queue_id
                )
            });
            resolved.push(Resolved {
                holds: holds.clone(),
                phys: entry.position().get(),
                from,
                queue: found,
                hold,
            });
        }
    }
    Ok(resolved)
}

/// The lowest physical offset any of `resolved` still needs.
pub(crate) fn floor(resolved: &[Resolved]) -> Option<u64> {
    resolved.iter().map(|held| held.phys).min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_holds_from_its_offset_or_the_minimum_and_nothing_at_the_end() {
        assert_eq!(held_from(5, 0, 10), Some(5));
        assert_eq!(held_from(2, 4, 10), Some(4), "below the minimum");
        assert_eq!(held_from(10, 4, 10), None, "everything consumed");
        assert_eq!(held_from(12, 4, 10), None, "past the end");
        assert_eq!(held_from(0, 0, 0), None, "an empty queue");
        assert_eq!(held_from(0, 1, 1), None, "a queue retention emptied");
    }

    #[test]
    fn a_hold_loses_what_the_minimum_moved_past() {
        assert_eq!(lost_range(5, 9), Some(5..9));
        assert_eq!(lost_range(5, 5), None);
        assert_eq!(lost_range(5, 3), None);
    }
}
