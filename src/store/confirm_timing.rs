//! How long SYNC_MASTER batches wait for their replica (D7, D14): the time from a batch's
//! write completing (its bytes in the CommitLog's files, where the HA streams read them)
//! to the replica's confirmation covering its end ([`super::Store::confirm_replicated`]).
//! That is the part of a SYNC_MASTER put's latency replication adds; the node puts it on
//! the metrics page as a histogram per shard.
//!
//! The store only times: each batch that waits for the replica's condition leaves its end
//! and write time here, and each confirmation takes every batch whose end it covers and
//! tells the hook ([`super::Store::set_confirm_hook`]) how long each waited. Nothing is
//! kept without a hook, and batches that stop waiting for the replica (it went away, the
//! store stops or changes role) are forgotten: a later confirmation of their bytes is not
//! a wait any put had.
//!
//! Invariants: batch ends are noted in ascending order (asserted, with both values), so
//! the oldest batch is always the next one a confirmation covers; at most
//! [`PENDING_MAX`] batches are held (past it a batch goes untimed, never misattributed).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use tokio::time::Instant;

/// Hears how long a batch waited for the replica's confirmation.
pub type ConfirmHook = Rc<dyn Fn(Duration)>;

/// Most batches timed at once. Batches wait for a replica at most `slaveTimeout` (3 s by
/// default); 65,536 batches in that time is over 20,000 group commits a second, beyond a
/// shard, and the table stays at 1.5 MiB. Past it a batch is simply not timed.
pub const PENDING_MAX: usize = 1 << 16;

/// The batches waiting for the replica's confirmation, oldest first, and who hears.
#[derive(Default)]
pub(crate) struct ConfirmTimes {
    pending: RefCell<VecDeque<(u64, Instant)>>,
    hook: RefCell<Option<ConfirmHook>>,
}

impl ConfirmTimes {
    pub fn set_hook(&self, hook: ConfirmHook) {
        *self.hook.borrow_mut() = Some(hook);
    }

    /// A batch ending at `end` was written at `at` and waits for the replica.
    pub fn written(&self, end: u64, at: Instant) {
        if self.hook.borrow().is_none() {
            return;
        }
        let mut pending = self.pending.borrow_mut();
        if let Some(&(last, _)) = pending.back() {
            assert!(
                end > last,
                "batches wait for the replica in log order: {end} noted after {last}"
            );
        }
        if pending.len() < PENDING_MAX {
            pending.push_back((end, at));
        }
    }

    /// The replica confirmed the log up to `position` at `at`: every batch ending at or
    /// below it waited `at - written`.
    pub fn confirmed(&self, position: u64, at: Instant) {
        let mut waits = Vec::new();
        {
            let mut pending = self.pending.borrow_mut();
            while let Some(&(end, written)) = pending.front() {
                if end > position {
                    break;
                }
                pending.pop_front();
                waits.push(at.saturating_duration_since(written));
            }
        }
        // The hook runs with no borrow held: it may do anything but call back here.
        if let Some(hook) = self.hook.borrow().clone() {
            for wait in waits {
                hook(wait);
            }
        }
    }

    /// The held batches stopped waiting for the replica: none will be timed.
    pub fn forget(&self) {
        self.pending.borrow_mut().clear();
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.pending.borrow().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn recording() -> (ConfirmTimes, Rc<RefCell<Vec<Duration>>>) {
        let heard = Rc::new(RefCell::new(Vec::new()));
        let times = ConfirmTimes::default();
        let sink = heard.clone();
        times.set_hook(Rc::new(move |wait| sink.borrow_mut().push(wait)));
        (times, heard)
    }

    #[test]
    fn a_confirmation_times_every_batch_it_covers_and_no_other() {
        let (times, heard) = recording();
        let start = Instant::now();
        times.written(100, start);
        times.written(250, start + Duration::from_millis(1));
        times.written(400, start + Duration::from_millis(2));
        times.confirmed(250, start + Duration::from_millis(5));
        assert_eq!(
            *heard.borrow(),
            [Duration::from_millis(5), Duration::from_millis(4)]
        );
        assert_eq!(times.held(), 1, "the batch ending at 400 still waits");
        times.confirmed(399, start + Duration::from_millis(6));
        assert_eq!(heard.borrow().len(), 2, "399 does not cover 400");
        times.confirmed(400, start + Duration::from_millis(9));
        assert_eq!(heard.borrow()[2], Duration::from_millis(7));
    }

    #[test]
    fn without_a_hook_nothing_is_held_and_forgotten_batches_are_not_timed() {
        let idle = ConfirmTimes::default();
        idle.written(10, Instant::now());
        assert_eq!(idle.held(), 0);
        let (times, heard) = recording();
        times.written(10, Instant::now());
        times.forget();
        times.confirmed(10, Instant::now());
        assert!(heard.borrow().is_empty());
    }

    #[test]
    fn a_flood_of_batches_is_held_up_to_the_bound() {
        let (times, heard) = recording();
        let at = Instant::now();
        for end in 1..=(PENDING_MAX as u64 + 10) {
            times.written(end, at);
        }
        assert_eq!(times.held(), PENDING_MAX);
        times.confirmed(u64::MAX, at);
        assert_eq!(heard.borrow().len(), PENDING_MAX);
    }

    #[test]
    #[should_panic(expected = "in log order: 5 noted after 10")]
    fn a_batch_noted_out_of_order_is_a_bug() {
        let (times, _heard) = recording();
        times.written(10, Instant::now());
        times.written(5, Instant::now());
    }
}
