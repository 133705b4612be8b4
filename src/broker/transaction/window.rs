//! The undecided half messages of one shard, as a window over its half queue: one byte per
//! half queue offset from the lowest offset not yet resolved (`base`) to the queue's end.
//!
//! A half is *resolved* once a decision (commit or rollback) or a discard (past
//! `transactionCheckMax`) is taken for it; until then the byte counts the checks it got.
//! Nothing else is kept per half: its topic, group and age are read from its record when
//! needed. So a million pending halves cost a megabyte, and the window shrinks from the
//! front as the oldest halves are resolved (checks resolve every half within
//! `transactionCheckMax` rounds).
//!
//! Invariants (asserted, always on):
//! - `base` only grows, and the window never covers an offset past the queue's end it was
//!   extended to.
//! - The slot at `base` is unresolved whenever the window is not empty after
//!   [`Window::advance`].
//! - `pending` equals the number of unresolved slots.

use std::collections::VecDeque;

/// The slot bit of a resolved half; the other bits count its checks.
const RESOLVED: u8 = 0x80;
/// The most checks a slot counts (`transactionCheckMax` is at most 100).
pub const MAX_COUNTED_CHECKS: u8 = 0x7f;

/// What [`Window::resolve`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// The half was undecided; it is resolved now.
    Resolved,
    /// A decision was taken for it before (or it is below the window): nothing changes.
    AlreadyResolved,
    /// The offset is past the window's end: no such half is known.
    Unknown,
}

#[derive(Debug, Default)]
pub struct Window {
    base: u64,
    slots: VecDeque<u8>,
    pending: u64,
}

impl Window {
    /// A window of unresolved, unchecked halves over `[base, end)`.
    pub fn new(base: u64, end: u64) -> Window {
        assert!(base <= end, "half window base {base} past its end {end}");
        let len = usize::try_from(end - base).expect("half window fits memory");
        Window {
            base,
            slots: VecDeque::from(vec![0u8; len]),
            pending: end - base,
        }
    }

    /// The lowest half offset not yet resolved (or the end, when all are).
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The end of the window: the half queue's end as last seen.
    pub fn end(&self) -> u64 {
        self.base + self.slots.len() as u64
    }

    /// Undecided halves in the window.
    pub fn pending(&self) -> u64 {
        self.pending
    }

    /// Bytes the window holds (for the memory figures).
    pub fn slot_bytes(&self) -> usize {
        self.slots.capacity()
    }

    /// Takes in the halves stored up to `end` (the half queue's end); an end below the
    /// window's is ignored (nothing is ever taken out but by resolution).
    pub fn extend_to(&mut self, end: u64) {
        let current = self.end();
        if end > current {
            let more = usize::try_from(end - current).expect("half window fits memory");
            self.slots.extend(std::iter::repeat_n(0u8, more));
            self.pending += end - current;
        }
    }

    fn slot(&self, offset: u64) -> Option<usize> {
        (offset >= self.base && offset < self.end()).then(|| (offset - self.base) as usize)
    }

    /// Whether the half at `offset` is resolved (offsets below the window are).
    pub fn is_resolved(&self, offset: u64) -> bool {
        match self.slot(offset) {
            Some(index) => self.slots[index] & RESOLVED != 0,
            None => offset < self.base,
        }
    }

    /// Marks the half at `offset` resolved, once.
    pub fn resolve(&mut self, offset: u64) -> Resolution {
        let Some(index) = self.slot(offset) else {
            return if offset < self.base {
                Resolution::AlreadyResolved
            } else {
                Resolution::Unknown
            };
        };
        if self.slots[index] & RESOLVED != 0 {
            return Resolution::AlreadyResolved;
        }
        self.slots[index] |= RESOLVED;
        assert!(self.pending > 0, "half {offset} resolved with none pending");
        self.pending -= 1;
        Resolution::Resolved
    }

    /// Takes back a resolution whose record could not be stored: the half is undecided
    /// again and will be checked. Only for a half resolved since the last
    /// [`Window::advance`] (the caller's own, still in the window).
    pub fn unresolve(&mut self, offset: u64) {
        let index = self.slot(offset).unwrap_or_else(|| {
            panic!(
                "half {offset} unresolved outside its window [{}, {})",
                self.base,
                self.end()
            )
        });
        assert!(
            self.slots[index] & RESOLVED != 0,
            "half {offset} unresolved but it was not resolved"
        );
        self.slots[index] &= !RESOLVED;
        self.pending += 1;
    }

    /// Checks the half at `offset` has had.
    pub fn checks(&self, offset: u64) -> u8 {
        self.slot(offset)
            .map(|index| self.slots[index] & MAX_COUNTED_CHECKS)
            .unwrap_or(0)
    }

    /// Counts one more check of the half at `offset` (saturating); returns the count.
    pub fn count_check(&mut self, offset: u64) -> u8 {
        let Some(index) = self.slot(offset) else {
            return 0;
        };
        let slot = &mut self.slots[index];
        if *slot & MAX_COUNTED_CHECKS < MAX_COUNTED_CHECKS {
            *slot += 1;
        }
        *slot & MAX_COUNTED_CHECKS
    }

    /// Drops the resolved halves at the front; returns the new base.
    pub fn advance(&mut self) -> u64 {
        while self.slots.front().is_some_and(|slot| slot & RESOLVED != 0) {
            self.slots.pop_front();
            self.base += 1;
        }
        if self.slots.len() * 4 < self.slots.capacity() && self.slots.capacity() > 4096 {
            self.slots.shrink_to_fit();
        }
        assert!(
            self.slots.front().is_none_or(|slot| slot & RESOLVED == 0),
            "half window starts at resolved offset {}",
            self.base
        );
        self.base
    }

    /// The unresolved offsets from `from` on, in order, at most `limit` of them.
    pub fn unresolved_from(&self, from: u64, limit: usize) -> Vec<u64> {
        let start = from.max(self.base);
        (start..self.end())
            .filter(|&offset| !self.is_resolved(offset))
            .take(limit)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_resolves_a_half_once_and_the_window_drops_it_from_the_front() {
        let mut window = Window::new(10, 13);
        assert_eq!(window.pending(), 3);
        assert_eq!(window.resolve(11), Resolution::Resolved);
        assert_eq!(window.resolve(11), Resolution::AlreadyResolved);
        assert_eq!(
            window.advance(),
            10,
            "10 is undecided: the window keeps 11 too"
        );
        assert_eq!(window.resolve(10), Resolution::Resolved);
        assert_eq!(window.advance(), 12);
        assert_eq!(window.pending(), 1);
        assert!(window.is_resolved(10) && window.is_resolved(11));
        assert_eq!(window.resolve(9), Resolution::AlreadyResolved);
        assert_eq!(window.resolve(13), Resolution::Unknown);
        window.extend_to(14);
        assert_eq!(window.resolve(13), Resolution::Resolved);
        assert_eq!(window.unresolved_from(0, 10), vec![12]);
    }

    #[test]
    fn checks_are_counted_per_half_and_survive_an_unresolve() {
        let mut window = Window::new(0, 2);
        assert_eq!(window.count_check(1), 1);
        assert_eq!(window.count_check(1), 2);
        assert_eq!(window.resolve(1), Resolution::Resolved);
        window.unresolve(1);
        assert!(!window.is_resolved(1));
        assert_eq!(window.checks(1), 2);
        assert_eq!(window.pending(), 2);
        for _ in 0..200 {
            window.count_check(0);
        }
        assert_eq!(window.checks(0), MAX_COUNTED_CHECKS);
    }

    #[test]
    #[should_panic(expected = "unresolved but it was not resolved")]
    fn unresolving_an_undecided_half_is_a_bug() {
        Window::new(0, 1).unresolve(0);
    }

    #[test]
    fn a_million_pending_halves_cost_about_a_megabyte() {
        let window = Window::new(0, 1_000_000);
        assert!(window.slot_bytes() < 1_100_000, "{}", window.slot_bytes());
        assert_eq!(window.pending(), 1_000_000);
    }
}
