//! Where one put's answer waits: filled once by the appender, or marked timed out by the
//! flush watchdog (with the reason: the flush or the replica), and awaited by the producer.
//!
//! It lives on the shard's thread only (`Rc`, `Cell`), so answering costs no atomics, and
//! the timeout is one watchdog task scanning in coarse ticks rather than a timer per put.
//! The first of "answer" and "time out" wins; the other is ignored. A producer that stops
//! waiting (drops its [`PutWait`]) costs nothing: the answer just lands in the slot.
//!
//! Instead of being awaited, a slot can be given a [`PutDone`] callback
//! ([`super::Store::put_with`]): the final outcome is then handed to it, exactly once, from
//! whichever of the appender and the watchdog decides it, and nothing waits. This is what
//! lets a send be answered without a task of its own.
//!
//! The slot is a state machine ([`SlotState`]); every transition is checked, always:
//!
//! ```text
//!   Waiting ──answer──▶ Answered ──poll──▶ Delivered
//!      │  ╰──time_out─▶ TimedOut(reason) ──poll──▶ Delivered
//!      ╰──answer / time_out, with a callback──▶ Delivered
//! ```
//!
//! An answer or timeout that comes after the outcome was decided is ignored (that is the
//! race the watchdog and the appender run); anything else off these arrows is a bug and
//! panics with both states named: polling a delivered slot, setting a callback on a slot
//! that is not waiting, or placing a message twice.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use super::{Placement, PutResult, PutStatus, StoreError};

/// Takes the final outcome of a put made with [`super::Store::put_with`].
pub type PutDone = Box<dyn FnOnce(Result<PutResult, StoreError>)>;

/// Where a put's outcome is.
#[derive(Debug)]
enum SlotState {
    /// Queued or being written: nothing is decided.
    Waiting,
    /// The appender's answer, not yet taken by the waiter.
    Answered(Result<PutResult, StoreError>),
    /// The watchdog gave up, for the reason the status names (the flush or the replica);
    /// the waiter has not heard it yet.
    TimedOut(PutStatus),
    /// The outcome went to the waiter or the callback. Final.
    Delivered,
}

impl SlotState {
    fn name(&self) -> &'static str {
        match self {
            SlotState::Waiting => "Waiting",
            SlotState::Answered(_) => "Answered",
            SlotState::TimedOut(_) => "TimedOut",
            SlotState::Delivered => "Delivered",
        }
    }
}

pub(crate) struct PutSlot {
    state: RefCell<SlotState>,
    /// The callback that takes the outcome, when nothing awaits the slot.
    done: RefCell<Option<PutDone>>,
    /// Set when the appender encodes the message, so a timeout can still say where it went.
    placed: Cell<Option<Placement>>,
    waker: RefCell<Option<Waker>>,
    /// The watchdog tick at which the put was queued.
    pub enqueued_tick: u64,
}

impl PutSlot {
    pub fn new(enqueued_tick: u64) -> Rc<PutSlot> {
        Rc::new(PutSlot {
            state: RefCell::new(SlotState::Waiting),
            done: RefCell::new(None),
            placed: Cell::new(None),
            waker: RefCell::new(None),
            enqueued_tick,
        })
    }

    /// Records where the appender encoded the message; once per slot.
    pub fn set_placed(&self, placement: Placement) {
        let previous = self.placed.replace(Some(placement));
        assert!(
            previous.is_none(),
            "put slot placed twice: at {placement:?} after {previous:?}"
        );
    }

    /// Hands the outcome to `done` instead of a waiter. Must be set before the appender
    /// can run, i.e. right after the put is queued, with no await in between.
    pub fn set_done(&self, done: PutDone) {
        let state = self.state.borrow();
        assert!(
            matches!(*state, SlotState::Waiting) && self.done.borrow().is_none(),
            "a put callback must be set once, on a waiting slot (state {}, callback set: {})",
            state.name(),
            self.done.borrow().is_some()
        );
        drop(state);
        *self.done.borrow_mut() = Some(done);
    }

    fn is_waiting(&self) -> bool {
        matches!(*self.state.borrow(), SlotState::Waiting)
    }

    /// The final answer, as stored with every condition met; ignored after a timeout or an
    /// earlier answer.
    pub fn answer(&self, result: Result<Placement, StoreError>) {
        self.answer_with(result, PutStatus::Ok);
    }

    /// The final answer of a put released with `status`: Ok, or SlaveNotAvailable for one
    /// that did not wait for a replica. Ignored after a timeout or an earlier answer.
    pub fn answer_with(&self, result: Result<Placement, StoreError>, status: PutStatus) {
        if !self.is_waiting() {
            return;
        }
        let outcome = result.map(|placement| PutResult {
            status,
            placement: Some(placement),
        });
        // Taken out before the call: the callback may do anything but touch this slot.
        let done = self.done.borrow_mut().take();
        match done {
            Some(done) => {
                self.settle(SlotState::Delivered);
                done(outcome);
            }
            None => {
                self.settle(SlotState::Answered(outcome));
                self.wake();
            }
        }
    }

    /// Gives up waiting: the producer hears `reason`, FlushDiskTimeout (the flush) or
    /// FlushSlaveTimeout (the replica), with wherever the message was placed.
    pub fn time_out(&self, reason: PutStatus) {
        assert!(
            matches!(
                reason,
                PutStatus::FlushDiskTimeout | PutStatus::FlushSlaveTimeout
            ),
            "a put times out for its flush or its replica, not with {reason:?}"
        );
        if !self.is_waiting() {
            return;
        }
        let done = self.done.borrow_mut().take();
        match done {
            Some(done) => {
                self.settle(SlotState::Delivered);
                done(Ok(PutResult {
                    status: reason,
                    placement: self.placed.get(),
                }))
            }
            None => {
                self.settle(SlotState::TimedOut(reason));
                self.wake();
            }
        }
    }

    /// Leaves `Waiting` for `to`; the callers checked the slot was waiting.
    fn settle(&self, to: SlotState) {
        let mut state = self.state.borrow_mut();
        assert!(
            matches!(*state, SlotState::Waiting),
            "put slot settled twice: {} -> {}",
            state.name(),
            to.name()
        );
        *state = to;
    }

    /// The waiter takes the decided outcome (`Answered` or `TimedOut` -> `Delivered`), or
    /// `None` while it is still `Waiting`.
    fn take_outcome(&self) -> Option<Result<PutResult, StoreError>> {
        let mut state = self.state.borrow_mut();
        let outcome = match std::mem::replace(&mut *state, SlotState::Delivered) {
            SlotState::Waiting => {
                *state = SlotState::Waiting;
                return None;
            }
            SlotState::Answered(answer) => answer,
            SlotState::TimedOut(reason) => Ok(PutResult {
                status: reason,
                placement: self.placed.get(),
            }),
            SlotState::Delivered => {
                panic!("a put slot's outcome was taken twice (polled after it completed)")
            }
        };
        Some(outcome)
    }

    fn wake(&self) {
        if let Some(waker) = self.waker.borrow_mut().take() {
            waker.wake();
        }
    }
}

/// The producer's side of a [`PutSlot`].
pub(crate) struct PutWait(pub Rc<PutSlot>);

impl Future for PutWait {
    type Output = Result<PutResult, StoreError>;

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let slot = &self.0;
        if let Some(outcome) = slot.take_outcome() {
            return Poll::Ready(outcome);
        }
        let mut waker = slot.waker.borrow_mut();
        match waker.as_ref() {
            Some(current) if current.will_wake(context.waker()) => {}
            _ => *waker = Some(context.waker().clone()),
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement() -> Placement {
        Placement {
            phys_offset: 64,
            queue_offset: 3,
            size: 100,
            store_timestamp: 7,
        }
    }

    fn poll_once(wait: &mut PutWait) -> Poll<Result<PutResult, StoreError>> {
        let waker = std::task::Waker::noop();
        Pin::new(wait).poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn the_first_of_answer_and_timeout_wins_and_the_waiter_takes_it_once() {
        let slot = PutSlot::new(0);
        let mut wait = PutWait(slot.clone());
        assert!(poll_once(&mut wait).is_pending());
        slot.set_placed(placement());
        slot.time_out(PutStatus::FlushDiskTimeout);
        slot.answer(Ok(placement()));
        match poll_once(&mut wait) {
            Poll::Ready(Ok(result)) => {
                assert_eq!(result.status, PutStatus::FlushDiskTimeout);
                assert_eq!(result.placement, Some(placement()));
            }
            other => panic!("expected the timeout, got {other:?}"),
        }
        // Late answers after delivery are still ignored.
        slot.answer(Ok(placement()));
        slot.time_out(PutStatus::FlushDiskTimeout);
    }

    #[test]
    fn a_callback_hears_exactly_one_outcome() {
        let slot = PutSlot::new(0);
        let heard = Rc::new(RefCell::new(Vec::new()));
        let sink = heard.clone();
        slot.set_done(Box::new(move |outcome| sink.borrow_mut().push(outcome)));
        slot.answer(Ok(placement()));
        slot.time_out(PutStatus::FlushDiskTimeout);
        slot.answer(Err(StoreError::ShuttingDown));
        assert_eq!(heard.borrow().len(), 1);
        assert_eq!(heard.borrow()[0].as_ref().unwrap().status, PutStatus::Ok);
    }

    #[test]
    fn a_timeout_and_an_answer_carry_their_reason() {
        let slot = PutSlot::new(0);
        let mut wait = PutWait(slot.clone());
        slot.set_placed(placement());
        slot.time_out(PutStatus::FlushSlaveTimeout);
        match poll_once(&mut wait) {
            Poll::Ready(Ok(result)) => {
                assert_eq!(result.status, PutStatus::FlushSlaveTimeout);
                assert_eq!(result.placement, Some(placement()));
            }
            other => panic!("expected the replica's timeout, got {other:?}"),
        }
        let slot = PutSlot::new(0);
        let heard = Rc::new(RefCell::new(Vec::new()));
        let sink = heard.clone();
        slot.set_done(Box::new(move |outcome| sink.borrow_mut().push(outcome)));
        slot.answer_with(Ok(placement()), PutStatus::SlaveNotAvailable);
        let status = heard.borrow()[0].as_ref().unwrap().status;
        assert_eq!(status, PutStatus::SlaveNotAvailable);
    }

    #[test]
    #[should_panic(expected = "not with SlaveNotAvailable")]
    fn a_timeout_without_a_timeout_reason_is_a_bug() {
        PutSlot::new(0).time_out(PutStatus::SlaveNotAvailable);
    }

    #[test]
    #[should_panic(expected = "taken twice")]
    fn polling_a_delivered_slot_is_a_bug() {
        let slot = PutSlot::new(0);
        let mut wait = PutWait(slot.clone());
        slot.answer(Ok(placement()));
        assert!(poll_once(&mut wait).is_ready());
        let _ = poll_once(&mut wait);
    }

    #[test]
    #[should_panic(expected = "must be set once, on a waiting slot (state Answered")]
    fn a_callback_set_after_the_answer_is_a_bug() {
        let slot = PutSlot::new(0);
        slot.answer(Ok(placement()));
        slot.set_done(Box::new(|_| {}));
    }

    #[test]
    #[should_panic(expected = "placed twice")]
    fn placing_a_message_twice_is_a_bug() {
        let slot = PutSlot::new(0);
        slot.set_placed(placement());
        slot.set_placed(placement());
    }
}
