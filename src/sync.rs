//! [`Locked`]: the one lock the node uses, for state that every shard reads and writes
//! off the data path (the topic table, consumer groups, committed consumer offsets).
//!
//! Why a plain mutex: these tables change on heartbeats, topic admin and offset commits,
//! a few times per second per client, never once per message, so a lock held for a map
//! lookup or insert costs nothing measurable; the data path (puts, pulls) stays lock-free
//! inside each shard (D3).
//!
//! Invariant: a panic while the lock is held does not poison the table for everyone
//! else. Each critical section leaves the table consistent before any call that can
//! panic, so the next locker takes the data as it is.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// A value behind a mutex whose lock never reports poisoning.
#[derive(Debug, Default)]
pub struct Locked<T>(Mutex<T>);

impl<T> Locked<T> {
    pub fn new(value: T) -> Locked<T> {
        Locked(Mutex::new(value))
    }

    /// Locks; a lock poisoned by a panicking holder is taken over as it is.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_panic_while_locked_does_not_lock_others_out() {
        let shared = Arc::new(Locked::new(1));
        let clone = shared.clone();
        let result = std::thread::spawn(move || {
            let mut guard = clone.lock();
            *guard = 2;
            panic!("holder panics");
        })
        .join();
        assert!(result.is_err());
        assert_eq!(*shared.lock(), 2);
    }
}
