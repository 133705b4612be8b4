//! Group commit that fills its batches with producers that wait for each answer.
//!
//! Under SYNC_FLUSH one fsync serves every put pending when its batch was taken. A
//! network producer that waits for each acknowledgement comes back one round trip after
//! its answer. By then the appender has already taken the puts that arrived during the
//! last fsync and started the next one, so N such producers split into two halves that
//! take turns, each fsync serving about N/2 (8 messages per fsync with 16 clients in
//! `perf/results/peers.md`). So once a batch is answered, the appender waits for the
//! producers it answered before it takes the next batch (the puts answered, whichever
//! condition answered them: a SYNC_MASTER's batch is answered by its replica's confirmation,
//! after its fsync). It waits until as many puts are
//! pending as were pending then plus the batch it answered, or until a deadline:
//! `group_commit_max_wait`, and never more than half the measured fsync time, so a wrong
//! guess costs a bounded fraction of what a shared fsync saves.
//!
//! The wait is a few shard turns, not a timer. tokio's timer has 1 ms granularity, more
//! than the whole window. Each turn yields to the shard's event loop, which reads the
//! sockets, so the returning puts arrive during the wait. It is bounded by the window and
//! by [`MAX_WAIT_TURNS`]. Measured with `perf/peers.sh`: with 16 clients an fsync carried
//! 8 messages before and 16 after, with 64 clients 32 before and 52 after.
//!
//! It never waits when nobody is expected. A lone producer's next put is the whole
//! target, so it is taken the moment it arrives. With nothing pending the appender sleeps
//! until a put arrives anyway. The wait also ends once the pending puts fill a batch, or
//! when the store closes.
//!
//! Invariants: an expectation always has a deadline at most the window after the answer
//! it follows, and at most [`MAX_WAIT_TURNS`] waiting turns. The target counts only the puts pending when the answers were made, plus
//! the puts answered.

use std::cell::Cell;
use std::time::Duration;

use std::time::Instant;

/// Turns of the shard one wait may take at most, whatever the clock says (a turn with
/// nothing to do takes a few µs): the wait also ends if time stands still, as it does
/// under tokio's paused test clock.
pub(crate) const MAX_WAIT_TURNS: u32 = 256;

/// What the appender does with the puts pending now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Take them as the next batch.
    Take,
    /// Let the shard take a turn (reading its sockets), then decide again.
    Wait,
}

#[derive(Clone, Copy, Debug)]
struct Expectation {
    /// Pending puts that end the wait.
    target: usize,
    deadline: Instant,
    turns_left: u32,
}

/// The appender's group-commit wait: the fsync time it measures and what it expects back.
#[derive(Default)]
pub(crate) struct Gather {
    expect: Cell<Option<Expectation>>,
    /// Moving average of the CommitLog fsync time (zero until one was measured).
    sync_average: Cell<Duration>,
    /// Waits that ended at their deadline, short of their target.
    timeouts: Cell<u64>,
}

impl Gather {
    /// A batch's fsync took `took`.
    pub(crate) fn synced(&self, took: Duration) {
        let average = self.sync_average.get();
        self.sync_average.set(if average.is_zero() {
            took
        } else {
            (average * 7 + took) / 8
        });
    }

    /// A durable batch of `answered` puts was just answered, with `pending` puts waiting.
    pub(crate) fn answered(
        &self,
        answered: usize,
        pending: usize,
        now: Instant,
        max_wait: Duration,
    ) {
        let window = max_wait.min(self.sync_average.get() / 2);
        if window.is_zero() || answered == 0 {
            self.expect.set(None);
            return;
        }
        self.expect.set(Some(Expectation {
            target: pending + answered,
            deadline: now + window,
            turns_left: MAX_WAIT_TURNS,
        }));
    }

    /// Whether a wait is under way (a batch was answered and its expectation not spent).
    pub(crate) fn expecting(&self) -> bool {
        self.expect.get().is_some()
    }

    /// What to do with `pending` puts, `pending_bytes` of them encoded, at `now`; a full
    /// batch (`max_batch_bytes`) and a closing store never wait. The wait ends with the
    /// first `Take`.
    pub(crate) fn decide(
        &self,
        pending: usize,
        pending_bytes: usize,
        max_batch_bytes: usize,
        closing: bool,
        now: Instant,
    ) -> Decision {
        let Some(expect) = self.expect.get() else {
            return Decision::Take;
        };
        let reached = pending >= expect.target || pending_bytes >= max_batch_bytes || closing;
        if !reached && now < expect.deadline && expect.turns_left > 0 {
            self.expect.set(Some(Expectation {
                turns_left: expect.turns_left - 1,
                ..expect
            }));
            return Decision::Wait;
        }
        if !reached {
            self.timeouts.set(self.timeouts.get() + 1);
        }
        self.expect.set(None);
        Decision::Take
    }

    /// Waits that ended at their deadline short of their target.
    #[cfg(test)]
    pub(crate) fn timeouts(&self) -> u64 {
        self.timeouts.get()
    }

    /// The measured fsync time's moving average.
    #[cfg(test)]
    pub(crate) fn sync_average(&self) -> Duration {
        self.sync_average.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 1 << 20;

    fn measured(sync: Duration) -> Gather {
        let gather = Gather::default();
        gather.synced(sync);
        gather
    }

    #[test]
    fn a_lone_producer_is_taken_the_moment_it_comes_back() {
        let gather = measured(Duration::from_millis(2));
        let now = Instant::now();
        gather.answered(1, 0, now, Duration::from_millis(1));
        assert_eq!(gather.decide(1, 100, MAX, false, now), Decision::Take);
        assert_eq!(gather.timeouts(), 0);
    }

    #[test]
    fn it_waits_for_the_answered_producers_up_to_half_the_fsync_time() {
        let gather = measured(Duration::from_micros(600));
        let now = Instant::now();
        // 8 answered, 8 arrived during the fsync: all 16 are expected back.
        gather.answered(8, 8, now, Duration::from_millis(1));
        let before = now + Duration::from_micros(299);
        assert_eq!(gather.decide(8, 800, MAX, false, now), Decision::Wait);
        assert_eq!(gather.decide(15, 1500, MAX, false, before), Decision::Wait);
        assert_eq!(gather.decide(16, 1600, MAX, false, now), Decision::Take);
        // The expectation is spent: the next decision takes at once.
        assert_eq!(gather.decide(1, 100, MAX, false, now), Decision::Take);
    }

    #[test]
    fn the_wait_is_bounded_by_the_setting_and_counts_its_timeouts() {
        let gather = measured(Duration::from_millis(10));
        let now = Instant::now();
        gather.answered(4, 0, now, Duration::from_micros(200));
        let deadline = now + Duration::from_micros(200);
        assert_eq!(gather.decide(1, 100, MAX, false, now), Decision::Wait);
        assert_eq!(gather.decide(1, 100, MAX, false, deadline), Decision::Take);
        assert_eq!(gather.timeouts(), 1);
        // Time standing still, the turns run out.
        gather.answered(4, 0, now, Duration::from_micros(200));
        for turn in 0..MAX_WAIT_TURNS {
            assert_eq!(
                gather.decide(1, 100, MAX, false, now),
                Decision::Wait,
                "turn {turn}"
            );
        }
        assert_eq!(gather.decide(1, 100, MAX, false, now), Decision::Take);
        assert_eq!(gather.timeouts(), 2);
    }

    #[test]
    fn a_full_batch_a_closing_store_or_a_zero_setting_never_wait() {
        let gather = measured(Duration::from_millis(2));
        let now = Instant::now();
        gather.answered(16, 0, now, Duration::from_millis(1));
        assert_eq!(gather.decide(2, MAX, MAX, false, now), Decision::Take);
        gather.answered(16, 0, now, Duration::from_millis(1));
        assert_eq!(gather.decide(2, 200, MAX, true, now), Decision::Take);
        gather.answered(16, 0, now, Duration::ZERO);
        assert_eq!(gather.decide(2, 200, MAX, false, now), Decision::Take);
        // Before any fsync was measured there is no window either.
        let fresh = Gather::default();
        fresh.answered(16, 0, now, Duration::from_millis(1));
        assert_eq!(fresh.decide(2, 200, MAX, false, now), Decision::Take);
    }

    #[test]
    fn the_fsync_average_follows_the_measurements() {
        let gather = measured(Duration::from_micros(800));
        gather.synced(Duration::from_micros(0));
        assert_eq!(gather.sync_average(), Duration::from_micros(700));
    }
}
