//! Where one put's answer waits: filled once by the appender, or marked timed out by the
//! flush watchdog, and awaited by the producer.
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

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use super::{Placement, PutResult, PutStatus, StoreError};

/// Takes the final outcome of a put made with [`super::Store::put_with`].
pub type PutDone = Box<dyn FnOnce(Result<PutResult, StoreError>)>;

pub(crate) struct PutSlot {
    answer: RefCell<Option<Result<Placement, StoreError>>>,
    /// The callback that takes the outcome, when nothing awaits the slot.
    done: RefCell<Option<PutDone>>,
    /// Set once the callback has had its outcome: whatever comes later is ignored.
    handed_over: Cell<bool>,
    timed_out: Cell<bool>,
    /// Set when the appender encodes the message, so a timeout can still say where it went.
    placed: Cell<Option<Placement>>,
    waker: RefCell<Option<Waker>>,
    /// The watchdog tick at which the put was queued.
    pub enqueued_tick: u64,
}

impl PutSlot {
    pub fn new(enqueued_tick: u64) -> Rc<PutSlot> {
        Rc::new(PutSlot {
            answer: RefCell::new(None),
            done: RefCell::new(None),
            handed_over: Cell::new(false),
            timed_out: Cell::new(false),
            placed: Cell::new(None),
            waker: RefCell::new(None),
            enqueued_tick,
        })
    }

    pub fn set_placed(&self, placement: Placement) {
        self.placed.set(Some(placement));
    }

    /// Hands the outcome to `done` instead of a waiter. Must be set before the appender
    /// can run, i.e. right after the put is queued, with no await in between.
    pub fn set_done(&self, done: PutDone) {
        *self.done.borrow_mut() = Some(done);
    }

    /// The final answer; ignored after a timeout or an earlier answer.
    pub fn answer(&self, result: Result<Placement, StoreError>) {
        if self.handed_over.get() || self.timed_out.get() || self.answer.borrow().is_some() {
            return;
        }
        // Taken out before the call: the callback may do anything but touch this slot.
        let done = self.done.borrow_mut().take();
        match done {
            Some(done) => {
                self.handed_over.set(true);
                done(result.map(|placement| PutResult {
                    status: PutStatus::Ok,
                    placement: Some(placement),
                }));
            }
            None => {
                *self.answer.borrow_mut() = Some(result);
                self.wake();
            }
        }
    }

    /// Gives up waiting for the flush: the producer hears FLUSH_DISK_TIMEOUT.
    pub fn time_out(&self) {
        if self.handed_over.get() || self.answer.borrow().is_some() || self.timed_out.replace(true)
        {
            return;
        }
        let done = self.done.borrow_mut().take();
        match done {
            Some(done) => {
                self.handed_over.set(true);
                done(Ok(PutResult {
                    status: PutStatus::FlushDiskTimeout,
                    placement: self.placed.get(),
                }))
            }
            None => self.wake(),
        }
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
        if let Some(answer) = slot.answer.borrow_mut().take() {
            return Poll::Ready(answer.map(|placement| PutResult {
                status: PutStatus::Ok,
                placement: Some(placement),
            }));
        }
        if slot.timed_out.get() {
            return Poll::Ready(Ok(PutResult {
                status: PutStatus::FlushDiskTimeout,
                placement: slot.placed.get(),
            }));
        }
        let mut waker = slot.waker.borrow_mut();
        match waker.as_ref() {
            Some(current) if current.will_wake(context.waker()) => {}
            _ => *waker = Some(context.waker().clone()),
        }
        Poll::Pending
    }
}
