//! The queue of waiters released by offset: where a written batch waits until every
//! acknowledgement condition has reached its end (D6, D7, D14).
//!
//! ```text
//!   register(end, payload)                       advance(condition, position)
//!          │                                                │
//!          ▼                                                ▼
//!   [ end 100 | end 250 | end 400 ]      Watermarks { Flushed: 250, Replicated: 400 }
//!     ▲ front, lowest end                    limit = min over the conditions = 250
//!     │
//!   pop_ready(): the front, while its end <= limit  ──▶  100, then 250; 400 stays
//! ```
//!
//! Every acknowledgement condition ([`AckCondition`]) is a position in the CommitLog that
//! only grows: the end of what is written (ASYNC_FLUSH), of what is synced (SYNC_FLUSH), of
//! what a replica confirmed (SYNC_MASTER, D14). A store requires one or more of them, by
//! its flush mode and its role ([`AckCondition::required`]); what is visible (and answered)
//! is everything up to the *minimum* of the required positions, the [`Watermarks`] limit.
//! A second condition is one more input to that minimum.
//!
//! The replica's condition can be waived per waiter ([`ReplicaWait::Waived`]): a batch
//! written while no replica is attached, or still held when the replica goes away or the
//! store stops, waits only for the local conditions (its puts hear why they were not
//! replicated, `append.rs`). Release stays in end order: a waived batch behind a held one
//! waits for it.
//!
//! The queue holds one entry per written batch (its end offset and its payload, the
//! batch's puts), not one per put, so registering and releasing cost one `VecDeque` push
//! and pop per batch (no allocation once the deque has grown to the usual depth: one
//! entry when every condition is reached in the appender's turn).
//!
//! Invariants, asserted always with the values in the message:
//! - waiters are registered in ascending end offsets, and released in that order;
//! - no waiter is released past the limit: `released <= limit` at all times;
//! - every required position only grows.
//!
//! A poison does not release: [`Waiters::take_all`] hands every waiting payload back
//! unreleased, for the caller to answer with the poison.

use std::collections::VecDeque;

use crate::config::{BrokerRole, FlushMode};

/// A position a batch must reach before it is visible and answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AckCondition {
    /// The batch's write completed: it is in the page cache (ASYNC_FLUSH).
    Written,
    /// The batch's fdatasync completed: it is durable on this node's disk (SYNC_FLUSH).
    Flushed,
    /// A replica confirmed it (SYNC_MASTER, D14): [`super::Store::confirm_replicated`].
    Replicated,
}

/// How many [`AckCondition`]s there are (the length of [`Watermarks`]' table).
const CONDITIONS: usize = 3;

impl AckCondition {
    fn index(self) -> usize {
        match self {
            AckCondition::Written => 0,
            AckCondition::Flushed => 1,
            AckCondition::Replicated => 2,
        }
    }

    /// What a store running `flush_mode` requires before a message is visible (D7).
    pub fn for_flush_mode(flush_mode: FlushMode) -> &'static [AckCondition] {
        match flush_mode {
            // flushed <= written, so requiring Written too would change nothing.
            FlushMode::Sync => &[AckCondition::Flushed],
            FlushMode::Async => &[AckCondition::Written],
        }
    }

    /// What a store running `flush_mode` as `role` requires before a message is visible
    /// and answered (D7, D14): the flush mode's condition, and under SYNC_MASTER a
    /// replica's confirmation as well. A SLAVE's store refuses puts (`replica.rs`): the
    /// flush mode's condition is what it would need once promoted.
    pub fn required(flush_mode: FlushMode, role: BrokerRole) -> &'static [AckCondition] {
        match (role, flush_mode) {
            (BrokerRole::AsyncMaster, mode) => AckCondition::for_flush_mode(mode),
            (BrokerRole::SyncMaster, FlushMode::Sync) => {
                &[AckCondition::Flushed, AckCondition::Replicated]
            }
            (BrokerRole::SyncMaster, FlushMode::Async) => {
                &[AckCondition::Written, AckCondition::Replicated]
            }
            // A replica refuses puts; promoted, it acknowledges like an ASYNC_MASTER.
            (BrokerRole::Slave, mode) => AckCondition::for_flush_mode(mode),
        }
    }
}

/// Whether a waiter waits for the replica's condition too, where the store requires it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReplicaWait {
    /// Every required condition, the replica's included.
    Wait,
    /// Only the local ones (written or flushed): no replica was attached, or it went away.
    Waived,
}

/// The position each required condition has reached; the visible limit is their minimum.
#[derive(Clone, Debug)]
pub(crate) struct Watermarks {
    /// `Some(position)` for each required condition, by [`AckCondition::index`].
    positions: [Option<u64>; CONDITIONS],
}

impl Watermarks {
    /// `conditions` all standing at `start`.
    pub fn new(conditions: &[AckCondition], start: u64) -> Watermarks {
        assert!(
            !conditions.is_empty(),
            "a store needs at least one acknowledgement condition"
        );
        let mut positions = [None; CONDITIONS];
        for condition in conditions {
            positions[condition.index()] = Some(start);
        }
        assert!(
            conditions
                .iter()
                .any(|condition| *condition != AckCondition::Replicated),
            "a store needs a local acknowledgement condition besides a replica's: {conditions:?}"
        );
        Watermarks { positions }
    }

    /// `condition` has reached `position`. A condition the store does not require is
    /// ignored (the appender reports Written under SYNC_FLUSH too).
    pub fn advance(&mut self, condition: AckCondition, position: u64) {
        if let Some(current) = &mut self.positions[condition.index()] {
            assert!(
                position >= *current,
                "acknowledgement condition {condition:?} may only grow: {current} -> {position}"
            );
            *current = position;
        }
    }

    /// Everything below this is acknowledged by every required condition.
    pub fn limit(&self) -> u64 {
        self.limit_for(ReplicaWait::Wait)
    }

    /// The limit of a waiter that waits as `replica` says: without the replica's
    /// condition when it is waived.
    pub fn limit_for(&self, replica: ReplicaWait) -> u64 {
        let skip = match replica {
            ReplicaWait::Wait => None,
            ReplicaWait::Waived => Some(AckCondition::Replicated.index()),
        };
        self.positions
            .iter()
            .enumerate()
            .filter(|(index, _)| Some(*index) != skip)
            .filter_map(|(_, position)| *position)
            .min()
            .expect("a Watermarks has a local condition (checked at new)")
    }

    /// Whether the store requires `condition`.
    pub fn requires(&self, condition: AckCondition) -> bool {
        self.positions[condition.index()].is_some()
    }
}

struct Waiter<T> {
    end: u64,
    payload: T,
    replica: ReplicaWait,
}

/// Waiters ordered by end offset, released by [`Watermarks`]. Not shared: the store keeps
/// it in a `RefCell` and borrows it only between its calls, never across a payload's
/// answers.
pub(crate) struct Waiters<T> {
    watermarks: Watermarks,
    queue: VecDeque<Waiter<T>>,
    /// The end of the newest waiter registered.
    registered: u64,
    /// The end of the newest waiter released; never past `watermarks.limit()`.
    released: u64,
}

impl<T> Waiters<T> {
    /// An empty queue at `start`, where every condition in `conditions` stands.
    pub fn new(conditions: &[AckCondition], start: u64) -> Waiters<T> {
        Waiters {
            watermarks: Watermarks::new(conditions, start),
            queue: VecDeque::new(),
            registered: start,
            released: start,
        }
    }

    /// Queues `payload`, to be released once every condition has reached `end` (but the
    /// replica's, when `replica` waives it).
    pub fn register(&mut self, end: u64, payload: T, replica: ReplicaWait) {
        assert!(
            end >= self.registered,
            "waiters must be registered in ascending end offsets: {end} after {}",
            self.registered
        );
        self.registered = end;
        self.queue.push_back(Waiter {
            end,
            payload,
            replica,
        });
    }

    /// Stops every waiter from waiting for the replica's condition, handing each one that
    /// was waiting for it to `waived` (to record why its puts go unreplicated). Releases
    /// nothing by itself.
    pub fn waive_replica(&mut self, mut waived: impl FnMut(&mut T)) {
        for waiter in &mut self.queue {
            if waiter.replica == ReplicaWait::Wait {
                waiter.replica = ReplicaWait::Waived;
                waived(&mut waiter.payload);
            }
        }
    }

    /// Whether any waiter still waits for the replica's condition.
    pub fn waits_for_replica(&self) -> bool {
        self.queue
            .iter()
            .any(|waiter| waiter.replica == ReplicaWait::Wait)
    }

    /// Where `condition` stands, if the store requires it.
    pub fn position(&self, condition: AckCondition) -> Option<u64> {
        self.watermarks.positions[condition.index()]
    }

    /// Whether the store requires `condition` (see [`Watermarks::requires`]).
    pub fn requires(&self, condition: AckCondition) -> bool {
        self.watermarks.requires(condition)
    }

    /// `condition` has reached `position` (see [`Watermarks::advance`]). Releases
    /// nothing by itself: [`Waiters::pop_ready`] does.
    pub fn advance(&mut self, condition: AckCondition, position: u64) {
        self.watermarks.advance(condition, position);
    }

    /// The minimum over the required conditions.
    pub fn limit(&self) -> u64 {
        self.watermarks.limit()
    }

    /// Whether [`Waiters::pop_ready`] would release something.
    pub fn ready(&self) -> bool {
        self.queue
            .front()
            .is_some_and(|front| front.end <= self.watermarks.limit_for(front.replica))
    }

    /// Releases the lowest waiter when its limit has reached its end: its end and payload.
    /// Call again until `None`; each call borrows the queue only for the pop.
    pub fn pop_ready(&mut self) -> Option<(u64, T)> {
        let limit = self.watermarks.limit_for(self.queue.front()?.replica);
        if self.queue.front()?.end > limit {
            return None;
        }
        let Waiter { end, payload, .. } = self.queue.pop_front().expect("front exists");
        assert!(
            self.released <= end && end <= limit,
            "waiters are released in ascending end offsets and never past the limit: \
             {end} after {}, limit {limit}",
            self.released
        );
        self.released = end;
        Some((end, payload))
    }

    /// Every waiting payload, unreleased, in end order; the queue is left empty (a poison:
    /// the caller answers them with it).
    pub fn take_all(&mut self) -> impl Iterator<Item = T> {
        std::mem::take(&mut self.queue)
            .into_iter()
            .map(|waiter| waiter.payload)
    }

    /// The waiting payloads, in end order, each with whether the local conditions (all
    /// but the replica's) have reached its end: what it still waits for, when the flush
    /// watchdog finds it overdue.
    pub fn iter(&self) -> impl Iterator<Item = (&T, bool)> {
        let local = self.watermarks.limit_for(ReplicaWait::Waived);
        self.queue
            .iter()
            .map(move |waiter| (&waiter.payload, waiter.end <= local))
    }

    /// The end of the newest waiter released.
    pub fn released(&self) -> u64 {
        self.released
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::AckCondition::{Flushed, Replicated, Written};
    use super::ReplicaWait::{Wait, Waived};
    use super::*;

    fn drain(waiters: &mut Waiters<&'static str>) -> Vec<(u64, &'static str)> {
        std::iter::from_fn(|| waiters.pop_ready()).collect()
    }

    #[test]
    fn waiters_release_in_offset_order_up_to_the_limit() {
        let mut waiters = Waiters::new(&[Written], 0);
        waiters.register(100, "a", Wait);
        waiters.register(250, "b", Wait);
        waiters.register(400, "c", Wait);
        waiters.advance(Written, 300);
        assert_eq!(drain(&mut waiters), vec![(100, "a"), (250, "b")]);
        assert_eq!((waiters.released(), waiters.len()), (250, 1));
        waiters.advance(Written, 400);
        assert_eq!(drain(&mut waiters), vec![(400, "c")]);
        assert!(waiters.is_empty());
    }

    #[test]
    fn a_waiter_whose_end_is_reached_exactly_is_released() {
        let mut waiters = Waiters::new(&[Flushed], 64);
        waiters.register(128, "a", Wait);
        waiters.advance(Flushed, 127);
        assert!(!waiters.ready());
        waiters.advance(Flushed, 128);
        assert!(waiters.ready());
        assert_eq!(drain(&mut waiters), vec![(128, "a")]);
    }

    #[test]
    fn the_limit_is_the_minimum_of_the_required_conditions() {
        let mut marks = Watermarks::new(&[Flushed, Replicated], 10);
        marks.advance(Flushed, 50);
        assert_eq!(marks.limit(), 10);
        marks.advance(Replicated, 70);
        assert_eq!(marks.limit(), 50);
        // A condition the store does not require is no input to the minimum.
        marks.advance(Written, 5);
        marks.advance(Written, 1000);
        assert_eq!(marks.limit(), 50);
    }

    #[test]
    fn a_second_condition_holds_release_until_it_advances() {
        // Flushed is SYNC_FLUSH's condition; Replicated stands in for a replica (D14).
        let mut waiters = Waiters::new(&[Flushed, Replicated], 0);
        waiters.register(100, "a", Wait);
        waiters.register(200, "b", Wait);
        waiters.advance(Written, 200);
        waiters.advance(Flushed, 200);
        assert!(!waiters.ready());
        assert!(drain(&mut waiters).is_empty());
        waiters.advance(Replicated, 150);
        assert_eq!(drain(&mut waiters), vec![(100, "a")]);
        waiters.advance(Replicated, 200);
        assert_eq!(drain(&mut waiters), vec![(200, "b")]);
        assert_eq!(waiters.released(), 200);
    }

    #[test]
    fn a_poison_takes_every_waiter_unreleased() {
        let mut waiters = Waiters::new(&[Flushed, Replicated], 0);
        waiters.register(100, "a", Wait);
        waiters.register(200, "b", Wait);
        waiters.register(300, "c", Wait);
        waiters.advance(Flushed, 300);
        waiters.advance(Replicated, 100);
        assert_eq!(drain(&mut waiters), vec![(100, "a")]);
        let mut answered = Vec::new();
        for payload in waiters.take_all() {
            answered.push(format!("{payload}: poisoned"));
        }
        assert_eq!(answered, ["b: poisoned", "c: poisoned"]);
        assert!(waiters.is_empty());
        // Nothing taken is released later, however far the conditions go.
        waiters.advance(Replicated, 300);
        assert!(drain(&mut waiters).is_empty());
        assert_eq!(waiters.released(), 100);
    }

    #[test]
    fn an_empty_release_is_a_no_op() {
        let mut waiters: Waiters<&'static str> = Waiters::new(&[Written], 0);
        assert!(!waiters.ready());
        assert!(waiters.pop_ready().is_none());
        waiters.advance(Written, 500);
        assert!(waiters.pop_ready().is_none());
        assert_eq!((waiters.released(), waiters.limit()), (0, 500));
        // A later waiter below the limit goes at once.
        waiters.register(300, "a", Wait);
        assert_eq!(drain(&mut waiters), vec![(300, "a")]);
    }

    #[test]
    fn the_flush_modes_require_their_position() {
        let mut sync: Waiters<()> = Waiters::new(AckCondition::for_flush_mode(FlushMode::Sync), 0);
        let mut async_: Waiters<()> =
            Waiters::new(AckCondition::for_flush_mode(FlushMode::Async), 0);
        sync.advance(Written, 100);
        async_.advance(Written, 100);
        assert_eq!((sync.limit(), async_.limit()), (0, 100));
        sync.advance(Flushed, 100);
        assert_eq!(sync.limit(), 100);
    }

    #[test]
    fn the_role_adds_the_replica_to_the_flush_modes_condition() {
        use crate::config::BrokerRole::{AsyncMaster, SyncMaster};
        assert_eq!(
            AckCondition::required(FlushMode::Sync, AsyncMaster),
            [Flushed]
        );
        assert_eq!(
            AckCondition::required(FlushMode::Async, AsyncMaster),
            [Written]
        );
        assert_eq!(
            AckCondition::required(FlushMode::Sync, SyncMaster),
            [Flushed, Replicated]
        );
        assert_eq!(
            AckCondition::required(FlushMode::Async, SyncMaster),
            [Written, Replicated]
        );
    }

    #[test]
    fn a_waived_waiter_needs_only_the_local_conditions_but_keeps_its_place() {
        let mut waiters = Waiters::new(&[Flushed, Replicated], 0);
        waiters.register(100, "held", Wait);
        waiters.register(200, "waived", Waived);
        waiters.advance(Flushed, 200);
        // The waived one is ready by itself, but the held one before it is not.
        assert!(drain(&mut waiters).is_empty());
        let locally_reached: Vec<_> = waiters.iter().map(|(_, local)| local).collect();
        assert_eq!(locally_reached, [true, true]);
        waiters.advance(Replicated, 100);
        assert_eq!(drain(&mut waiters), vec![(100, "held"), (200, "waived")]);
    }

    #[test]
    fn waiving_the_replica_releases_on_the_local_conditions() {
        let mut waiters = Waiters::new(&[Flushed, Replicated], 0);
        waiters.register(100, "a", Wait);
        waiters.register(200, "b", Waived);
        waiters.register(300, "c", Wait);
        waiters.advance(Flushed, 200);
        let mut marked = Vec::new();
        waiters.waive_replica(|payload| marked.push(*payload));
        assert_eq!(marked, ["a", "c"], "only those that waited for the replica");
        assert_eq!(drain(&mut waiters), vec![(100, "a"), (200, "b")]);
        waiters.advance(Flushed, 300);
        assert_eq!(drain(&mut waiters), vec![(300, "c")]);
    }

    #[test]
    #[should_panic(expected = "ascending end offsets: 50 after 100")]
    fn registering_below_the_last_end_is_a_bug() {
        let mut waiters = Waiters::new(&[Written], 0);
        waiters.register(100, "a", Wait);
        waiters.register(50, "b", Wait);
    }

    #[test]
    #[should_panic(expected = "Flushed may only grow: 100 -> 90")]
    fn a_condition_moving_back_is_a_bug() {
        let mut waiters: Waiters<()> = Waiters::new(&[Flushed], 0);
        waiters.advance(Flushed, 100);
        waiters.advance(Flushed, 90);
    }
}
