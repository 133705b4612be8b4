//! Closing ended connections' sockets a few at a time, so that many connections ending at
//! once do not hold up the shard's other connections.
//!
//! Closing a TCP socket is not free: it leaves the poller (`epoll_ctl`) and the kernel
//! tears the connection down in the closing thread, on loopback including the peer's side.
//! When 500 clients drop their connections at once, every connection task ends in the
//! same turn of the shard, and closing all 500 sockets there stalled another connection's
//! round trip by about 12 ms (issue 10, `examples/client_sweep_stall.rs`). A connection
//! that ends hands what it leaves here instead: its read half (the socket closes when it
//! goes), the stop of its writer task (whose cancellation drops the connection's write
//! state) and its read buffer. The shard's closer drops at most [`CLOSE_BATCH`] of them
//! per turn and yields between batches, so the shard's I/O is polled between them, and
//! the connections still open wait behind one batch, not behind all of them.
//!
//! Invariant: a handed-over socket is closed within the turns it takes to drain the
//! queue ahead of it, each bounded; it never waits for anything but the shard's own
//! turns. A closer whose runtime went away is replaced by a new one on the next close,
//! and what was queued on it closes as it is dropped.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use tokio::sync::Notify;

/// Sockets closed per turn of the shard.
pub const CLOSE_BATCH: usize = 32;

/// Anything whose drop closes a socket.
type Closing = Box<dyn std::any::Any>;

#[derive(Default)]
struct Closer {
    queue: RefCell<VecDeque<Closing>>,
    wake: Notify,
    /// Its task is still there: false once the task is dropped (its runtime went away;
    /// tests run one runtime after another on a thread), and a new closer takes over.
    alive: Cell<bool>,
}

thread_local! {
    /// This thread's closer, once one of its connections has ended.
    static CLOSER: RefCell<Option<Rc<Closer>>> = const { RefCell::new(None) };
}

/// Aborts a task when dropped: a connection's writer task, stopped by the closer with
/// the socket it writes to.
pub(crate) struct AbortOnDrop(pub tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Closes `socket` (by dropping it) on a later turn of this thread's closer. Must be
/// called inside a `LocalSet`, as a connection's task is.
pub(crate) fn close_later<T: 'static>(socket: T) {
    let closer = CLOSER.try_with(|current| {
        let mut current = current.borrow_mut();
        match current.as_ref() {
            Some(closer) if closer.alive.get() => closer.clone(),
            _ => {
                let closer = Rc::new(Closer::default());
                closer.alive.set(true);
                tokio::task::spawn_local(run(closer.clone()));
                *current = Some(closer.clone());
                closer
            }
        }
    });
    // The thread is going away: close here.
    let Ok(closer) = closer else {
        return drop(socket);
    };
    closer.queue.borrow_mut().push_back(Box::new(socket));
    closer.wake.notify_one();
}

async fn run(closer: Rc<Closer>) {
    /// Marks the closer dead however its task ends (it is dropped with its runtime).
    struct Alive(Rc<Closer>);
    impl Drop for Alive {
        fn drop(&mut self) {
            self.0.alive.set(false);
        }
    }
    let alive = Alive(closer);
    let closer = &alive.0;
    loop {
        loop {
            let batch: Vec<Closing> = {
                let mut queue = closer.queue.borrow_mut();
                let take = queue.len().min(CLOSE_BATCH);
                queue.drain(..take).collect()
            };
            if batch.is_empty() {
                break;
            }
            drop(batch);
            tokio::task::yield_now().await;
        }
        closer.wake.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Counted(Rc<Cell<usize>>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }

    #[test]
    fn sockets_are_closed_a_batch_per_turn_and_all_of_them_in_the_end() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&runtime, async {
            let closed = Rc::new(Cell::new(0));
            let total = 3 * CLOSE_BATCH + 5;
            for _ in 0..total {
                close_later(Counted(closed.clone()));
            }
            assert_eq!(closed.get(), 0, "nothing is closed in the caller's turn");
            let mut turns = 0;
            while closed.get() < total {
                tokio::task::yield_now().await;
                turns += 1;
                assert!(
                    closed.get() <= turns * CLOSE_BATCH,
                    "{} closed after {turns} turns: more than {CLOSE_BATCH} a turn",
                    closed.get()
                );
                assert!(turns < 1000, "only {} of {total} closed", closed.get());
            }
        });
    }

    #[test]
    fn a_closer_whose_runtime_went_away_is_replaced() {
        let closed = Rc::new(Cell::new(0));
        for round in 1..=2 {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            tokio::task::LocalSet::new().block_on(&runtime, async {
                close_later(Counted(closed.clone()));
                while closed.get() < round {
                    tokio::task::yield_now().await;
                }
            });
        }
        assert_eq!(closed.get(), 2);
    }
}
