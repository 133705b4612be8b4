//! Watching the store's tasks and the shard's (D11, failure policy): a panic in
//! any of them poisons the store with the panic message, is logged and counted
//! (`StoreStats::task_panics`), and every put still waiting is answered with that poison at
//! once. Later puts are refused with it.
//!
//! Without this a panicking appender would leave the shard running with nobody writing:
//! each queued put would be answered FLUSH_DISK_TIMEOUT by the watchdog, which a client
//! takes for a send result, not an error, and a shutdown would wait for it forever.
//!
//! How: every task runs inside [`Watched`], which polls it under `catch_unwind`. A task
//! that panicked is never polled again; the watcher ends it. The watcher holds the store
//! weakly, so it keeps nothing alive that its task does not.
//!
//! Invariant: after a watched task panicked, the store is poisoned and every put that was
//! queued, in flight or written and waiting for release (`waiters.rs`) has its answer;
//! when the task was the appender, the appender counts as idle (so `shutdown` does not
//! wait for it).

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll};

use super::{Shared, StoreError};

/// The store's own tasks, by name (for the poison cause, and the test hook).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreTask {
    Appender,
    Flusher,
    Checkpointer,
    Watchdog,
    Preallocator,
    Cleaner,
    LeaseRecheck,
}

impl StoreTask {
    pub fn name(self) -> &'static str {
        match self {
            StoreTask::Appender => "appender",
            StoreTask::Flusher => "flusher",
            StoreTask::Checkpointer => "checkpointer",
            StoreTask::Watchdog => "flush watchdog",
            StoreTask::Preallocator => "segment preallocator",
            StoreTask::Cleaner => "retention cleaner",
            StoreTask::LeaseRecheck => "write lease recheck",
        }
    }
}

/// Which task a watcher watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Watchee {
    Store(StoreTask),
    /// A shard task, by name ([`super::Store::watch`]).
    Shard(&'static str),
}

impl Watchee {
    fn name(self) -> &'static str {
        match self {
            Watchee::Store(task) => task.name(),
            Watchee::Shard(name) => name,
        }
    }
}

/// A task under watch: its output, or `None` when it panicked.
pub struct Watched<F> {
    task: Watchee,
    shared: Weak<Shared>,
    future: Pin<Box<F>>,
}

pub(crate) fn watched<F: Future>(shared: &Rc<Shared>, task: Watchee, future: F) -> Watched<F> {
    Watched {
        task,
        shared: Rc::downgrade(shared),
        future: Box::pin(future),
    }
}

impl<F: Future> Future for Watched<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        // The task is not polled again after a panic, so whatever state it broke is only
        // ever dropped; the store's shared state is repaired by `task_panicked`.
        match catch_unwind(AssertUnwindSafe(|| this.future.as_mut().poll(context))) {
            Ok(poll) => poll.map(Some),
            Err(payload) => {
                let message = panic_message(payload.as_ref());
                match this.shared.upgrade() {
                    Some(shared) => task_panicked(&shared, this.task, &message),
                    None => tracing::error!("task {} panicked: {message}", this.task.name()),
                }
                Poll::Ready(None)
            }
        }
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        text.to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// Poisons the store for the panic, counts and logs it, and answers every waiting put.
pub(crate) fn task_panicked(shared: &Shared, watchee: Watchee, message: &str) {
    let task = watchee.name();
    shared.update_stats(|stats| stats.task_panics += 1);
    tracing::error!(
        "store {}: the {task} task panicked: {message}",
        shared.config.dir.display()
    );
    shared.poison(format!("the {task} task panicked: {message}"));
    let error = shared
        .poisoned()
        .expect("the store was poisoned just above");
    if watchee == Watchee::Store(StoreTask::Appender) {
        // Nobody will finish its batch: shutdown must not wait for it. Done before the
        // answers below, which run the same callbacks that may just have panicked.
        shared.appender_busy.set(false);
        shared.appender_idle.notify_waiters();
    }
    fail_waiting_puts(shared, &error);
}

/// Answers every queued, in-flight and written-but-unreleased put with `error`. The slots
/// are taken out (or, for the waiter queue, copied) first: an answer may run a callback
/// that queues a put (which the poison then refuses). When the appender is alive, it still
/// finishes its batch and releases what it registered; its answers are then ignored.
fn fail_waiting_puts(shared: &Shared, error: &StoreError) {
    let queued: Vec<_> = shared.pending.borrow_mut().drain(..).collect();
    let in_flight = std::mem::take(&mut *shared.in_flight.borrow_mut());
    let unreleased: Vec<_> = shared
        .waiters
        .borrow()
        .iter()
        .flat_map(|(batch, _)| &batch.puts)
        .map(|item| item.put.slot.clone())
        .collect();
    for slot in in_flight
        .into_iter()
        .chain(unreleased)
        .chain(queued.into_iter().map(|put| put.slot))
    {
        // Each answer on its own: a callback that panics again (often the very one that
        // poisoned the store) must not leave the slots after it without an answer. The
        // store is already poisoned, so the panic is only logged.
        let answered = catch_unwind(AssertUnwindSafe(|| slot.answer(Err(error.clone()))));
        if let Err(payload) = answered {
            tracing::error!(
                "store {}: a put callback panicked while hearing the poison: {}",
                shared.config.dir.display(),
                panic_message(payload.as_ref())
            );
        }
    }
}

/// The test hook behind [`super::Store::inject_task_panic`]: panics in `task` when a test
/// asked for it. One `Cell` read per task turn.
pub(crate) fn panic_point(shared: &Shared, task: StoreTask) {
    if shared.injected_panic.get() == Some(task) {
        shared.injected_panic.set(None);
        panic!("injected panic in the {} task (test hook)", task.name());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_messages_are_read_from_str_and_string_payloads() {
        let text: Box<dyn Any + Send> = Box::new("boom");
        assert_eq!(panic_message(text.as_ref()), "boom");
        let owned: Box<dyn Any + Send> = Box::new(format!("boom {}", 2));
        assert_eq!(panic_message(owned.as_ref()), "boom 2");
        let other: Box<dyn Any + Send> = Box::new(7u8);
        assert_eq!(panic_message(other.as_ref()), "a panic without a message");
    }
}
