//! Where one put's answer waits: filled once by the appender, or marked timed out by the
//! flush watchdog, and awaited by the producer.
//!
//! It lives on the shard's thread only (`Rc`, `Cell`), so answering costs no atomics, and
//! the timeout is one watchdog task scanning in coarse ticks rather than a timer per put.
//! The first of "answer" and "time out" wins; the other is ignored. A producer that stops
//! waiting (drops its [`PutWait`]) costs nothing: the answer just lands in the slot.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use super::{Placement, PutResult, PutStatus, StoreError};

pub(crate) struct PutSlot {
    answer: RefCell<Option<Result<Placement, StoreError>>>,
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
            timed_out: Cell::new(false),
            placed: Cell::new(None),
            waker: RefCell::new(None),
            enqueued_tick,
        })
    }

    pub fn set_placed(&self, placement: Placement) {
        self.placed.set(Some(placement));
    }

    /// The final answer; ignored after a timeout or an earlier answer.
    pub fn answer(&self, result: Result<Placement, StoreError>) {
        if self.timed_out.get() || self.answer.borrow().is_some() {
            return;
        }
        *self.answer.borrow_mut() = Some(result);
        self.wake();
    }

    /// Gives up waiting for the flush: the producer hears FLUSH_DISK_TIMEOUT.
    pub fn time_out(&self) {
        if self.answer.borrow().is_some() || self.timed_out.replace(true) {
            return;
        }
        self.wake();
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
